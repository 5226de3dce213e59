"""kvlab.measure.published: the guide's table and the external reference points, as data."""

from kvlab.measure.published import GUIDE, PUBLISHED


def test_the_guide_rates_three_caches_on_four_properties():
    assert list(GUIDE) == ["dynamic", "static", "quantized"]
    assert [row["cache"] for row in GUIDE.values()] == ["Dynamic Cache", "Static Cache", "Quantized Cache"]
    assert all(
        set(row) == {"cache", "sliding layers", "offloading", "torch.compile", "memory"} for row in GUIDE.values()
    )
    assert [row["torch.compile"] for row in GUIDE.values()] == ["No", "Yes", "No"]
    assert [row["memory"] for row in GUIDE.values()] == ["Medium", "High", "Low"]


def test_reference_points_carry_a_source_a_ratio_and_a_claim_in_words():
    assert PUBLISHED and all({"label", "source", "memory_ratio", "claim"} <= set(p) for p in PUBLISHED)
    assert all(0 < p["memory_ratio"] < 1 for p in PUBLISHED)
