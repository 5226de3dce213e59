import math

import matplotlib.figure

from kvlab.plots.streaming import guide_points, loss_by_position, strategy_frontier

ROWS = [
    {"label": "full cache (the model's own)", "nll": [2.0] * 100},
    {"label": "window, no sinks", "nll": [2.0] * 40 + [5.0] * 60},
]


def test_one_line_per_cache_of_the_rolling_loss_and_the_budget_marked():
    fig = loss_by_position(ROWS, budget=40, width=10)
    assert isinstance(fig, matplotlib.figure.Figure)
    ax = fig.axes[0]
    solid = [line for line in ax.lines if line.get_linestyle() == "-"]
    assert [line.get_label() for line in solid] == [row["label"] for row in ROWS]
    window = solid[1].get_ydata()
    assert math.isclose(window[30], 2.0) and math.isclose(window[-1], 5.0)  # the loss rises once tokens leave
    assert list(solid[0].get_xdata()[:2]) == [2, 3]  # the first prediction is the second token's
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert [line.get_xdata()[0] for line in dashed] == [41]
    assert any("cache full (40 tokens)" in text.get_text() for text in ax.texts)


def _row(cache: str, label: str, ratio, delta, status: str = "measured") -> dict:
    return {"cache": cache, "label": label, "status": status, "ratio_vs_dynamic": ratio, "perplexity_delta_pct": delta}


GUIDE = [
    _row("none", "none", 0.0, 0.0),
    _row("dynamic", "dynamic", 1.0, 0.0),
    _row("static", "static", 1.006, 0.0),
    _row("dynamic", "dynamic (plain transformers)", None, None),
    _row("quantized", "quantized hqq int4", 0.32, 1.8),
    _row("quantized", "quantized fp8", None, None, status="unsupported"),
]
STRATEGIES = [{"label": "window, no sinks", "ratio_vs_dynamic": 0.17, "perplexity_delta_pct": 200.0}]


def test_guide_points_keep_the_dynamic_cache_and_the_kinds_that_save_memory():
    points = guide_points(GUIDE)
    assert [p["label"] for p in points] == ["dynamic", "quantized hqq int4"]
    assert points[1]["memory"] == 0.32 and math.isclose(points[1]["perplexity"], 1.018)


def test_the_frontier_draws_both_groups_in_their_own_colours():
    fig = strategy_frontier(STRATEGIES, GUIDE)
    ax = fig.axes[0]
    offsets = [collection.get_offsets().tolist() for collection in ax.collections]
    assert offsets == [[[1.0, 1.0], [0.32, 1.018]], [[0.17, 3.0]]]
    assert {text.get_text() for text in ax.texts} == {"dynamic", "quantized hqq int4", "window, no sinks"}
    assert ax.get_yscale() == "log"
    assert len(ax.get_legend().get_texts()) == 2
