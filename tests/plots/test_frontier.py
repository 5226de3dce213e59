import matplotlib.figure

from kvlab.measure.published import PUBLISHED
from kvlab.plots.frontier import frontier, frontier_points

ROWS = [
    {"label": "dynamic", "status": "measured", "ratio_vs_dynamic": 1.0, "perplexity_delta_pct": 0.0},
    {"label": "quanto int4", "status": "measured", "ratio_vs_dynamic": 0.3, "perplexity_delta_pct": 2.5},
    {"label": "quantized on gemma3", "status": "unsupported", "unsupported": "sliding layers"},
    {"label": "plain", "status": "measured", "ratio_vs_dynamic": None, "perplexity_delta_pct": None},
]


def test_points_are_the_measured_rows_with_bytes_and_quality():
    assert [p["label"] for p in frontier_points(ROWS)] == ["dynamic", "quanto int4"]


def test_published_results_are_drawn_apart_as_external_references():
    fig = frontier(ROWS)
    assert isinstance(fig, matplotlib.figure.Figure)
    ax = fig.axes[0]
    measured = sum(len(c.get_offsets()) for c in ax.collections)
    assert measured == 2
    texts = [t.get_text() for t in ax.texts]
    assert sum(t.startswith(" external:") for t in texts) == len(PUBLISHED)
    assert any("not measured by kvlab" in t for t in texts)
    vertical = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert sorted(round(line.get_xdata()[0], 3) for line in vertical) == sorted(
        round(p["memory_ratio"], 3) for p in PUBLISHED
    )
