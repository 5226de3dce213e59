import sys

import pytest

from kvlab.i18n import set_language
from kvlab.plots.prefill_bars import plot_prefill_bars


def test_one_group_per_request_and_one_bar_per_series():
    series = {"reused": [(19, 0.1), (21, 0.2), (18, 0.1)], "fresh": [(136, 0.5), (170, 0.7), (200, 0.9)]}
    fig = plot_prefill_bars(series, "turn", "time to first token (ms)", "title")
    tokens_ax, time_ax = fig.axes
    assert [t.get_text() for t in tokens_ax.get_xticklabels()] == ["turn 1", "turn 2", "turn 3"]
    assert sorted(p.get_height() for p in tokens_ax.patches) == sorted([19, 21, 18, 136, 170, 200])
    tallest = max(p.get_height() for p in time_ax.patches)
    assert tallest == pytest.approx(900.0, rel=sys.float_info.epsilon)  # seconds shown in ms: one rounding
    assert [t.get_text() for t in time_ax.get_legend().get_texts()] == ["reused", "fresh"]
    assert [t.get_text() for t in tokens_ax.texts] == ["19", "21", "18", "136", "170", "200"]  # counts on the bars


def test_the_legend_sits_outside_both_panels_and_series_take_palette_colours():
    from matplotlib.colors import to_hex

    from kvlab.plots.palette import series as series_color

    fig = plot_prefill_bars({"a": [(3, 0.1)], "b": [(9, 0.2)]}, "turn", "ms", "title")
    tokens_ax, time_ax = fig.axes
    fig.canvas.draw()
    legend = time_ax.get_legend().get_window_extent()
    assert legend.x0 >= time_ax.get_window_extent().x1  # right of the time panel: it covers no bar
    assert [to_hex(p.get_facecolor()) for p in tokens_ax.patches] == [series_color(0), series_color(1)]


def test_repeated_timings_draw_the_median_with_its_interquartile_range():
    from kvlab.measure.timing import Timing

    series = {"reused": [(19, Timing("t1", [0.10, 0.12, 0.11])), (21, Timing("t2", [0.20, 0.30, 0.25]))]}
    fig = plot_prefill_bars(series, "turn", "generate time (ms)", "title")
    _, time_ax = fig.axes
    assert [round(p.get_height(), 6) for p in time_ax.patches] == [110.0, 250.0]
    whiskers = next(c for c in time_ax.containers if hasattr(c, "has_yerr")).lines[2][0]
    low, high = whiskers.get_segments()[1][:, 1]  # the second bar's whisker, in ms
    assert (round(low, 6), round(high, 6)) == (225.0, 275.0)


def test_the_verdicts_are_drawn_under_the_bars():
    from kvlab.plots.prefill_bars import plot_prefill_bars

    fig = plot_prefill_bars({"a": [(10, 0.1)], "b": [(20, 0.2)]}, "turn", "ms", "t", verdicts=["v"])
    assert fig.texts[-1].get_text() == "turn 1: v"


def test_token_counts_are_written_with_the_readers_marks():
    set_language("pt-BR")
    try:
        fig = plot_prefill_bars({"novo": [(1024, 0.1), (19, 0.2)]}, "turno", "ms", "título")
    finally:
        set_language(None)
    assert [t.get_text() for t in fig.axes[0].texts] == ["1.024", "19"]
