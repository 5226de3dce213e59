"""kvlab.plots.kv_bytes: grouped horizontal byte bars with an automatic unit."""

from kvlab.plots.kv_bytes import plot_bytes, unit_for


def test_unit_follows_the_largest_value():
    assert unit_for(3 * 2**30) == ("GiB", 2**30)
    assert unit_for(5 * 2**20) == ("MiB", 2**20)
    assert unit_for(100) == ("B", 1)


def test_bars_are_scaled_and_grouped():
    fig = plot_bytes({"a": {"4k": 2**30, "32k": 8 * 2**30}, "b": {"4k": 2**29, "32k": 4 * 2**30}})
    ax = fig.axes[0]
    assert sorted(round(p.get_width(), 2) for p in ax.patches) == [0.5, 1.0, 4.0, 8.0]
    assert ax.get_xlabel() == "bytes (GiB)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["4k", "32k"]
