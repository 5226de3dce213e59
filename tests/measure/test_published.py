"""kvlab.measure.published: what the guide's words and the external reference points are used for (the
guide table's verdicts, the frontier plot), rather than the data re-typed."""

import re

import pytest

from kvlab.measure.guide_table import MEMORY_RANKS, TABLE_PROPERTIES, compare_with_guide
from kvlab.measure.published import GUIDE, PUBLISHED
from kvlab.plots.frontier import frontier


@pytest.mark.parametrize("kind", list(GUIDE))
def test_a_measurement_in_the_guides_words_agrees_and_any_other_word_is_flagged(kind):
    claim = GUIDE[kind]
    assert [c["agrees"] for c in compare_with_guide([claim])] == [True] * len(TABLE_PROPERTIES)
    for prop in TABLE_PROPERTIES:
        measured = {**claim, prop: claim[prop] + " (measured otherwise)"}
        verdicts = {c["property"]: c["agrees"] for c in compare_with_guide([measured])}
        assert verdicts == {p: p != prop for p in TABLE_PROPERTIES}, (kind, prop)


def test_the_guides_memory_words_are_the_ranks_the_table_measures():
    # guide_table ranks the three caches' measured peaks with MEMORY_RANKS: the guide must use each word once
    assert sorted(row["memory"] for row in GUIDE.values()) == sorted(MEMORY_RANKS)


def test_every_reference_is_drawn_on_the_frontier_at_its_ratio_with_its_claim():
    ax = frontier([], published=PUBLISHED).axes[0]
    vertical = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "--")
    assert vertical == sorted(p["memory_ratio"] for p in PUBLISHED)
    legend = next(t.get_text() for t in ax.texts if "not measured by kvlab" in t.get_text())
    for p in PUBLISHED:
        assert p["label"] in legend and p["claim"] in legend
    assert not [line for line in frontier([], published=[]).axes[0].lines if line.get_linestyle() == "--"]


def test_nominal_ratios_are_the_bits_named_in_the_label_over_16():
    nominal = [p for p in PUBLISHED if re.search(r"int(\d+)", p["label"])]
    assert nominal  # the HF blog's quanto points
    for p in nominal:
        bits = int(re.search(r"int(\d+)", p["label"]).group(1))
        assert p["memory_ratio"] == pytest.approx(bits / 16, rel=4 * 2**-52)
    assert all(0 < p["memory_ratio"] < 1 for p in PUBLISHED)  # each a saving against a 16-bit cache
