import pytest
from matplotlib.figure import Figure

from kvlab.measure.timing import Timing
from kvlab.plots.generate_time import plot_generate_time


def curves_and_circles(ax):
    """The series' lines and the circled points among an axes' lines (error bar caps are lines too)."""
    lines = ax.get_lines()
    return [ln for ln in lines if ln.get_linestyle() == "-"], [ln for ln in lines if ln.get_fillstyle() == "none"]


def test_decode_steps_with_their_spread_and_the_first_token_for_every_prompt_measured():
    steps = {
        "use_cache=False": {64: Timing("a", [0.2, 0.2, 0.2]), 16: Timing("b", [0.1, 0.1, 0.1])},
        "DynamicCache": {16: Timing("c", [0.05, 0.06, 0.07]), 64: Timing("d", [0.06] * 3)},
    }
    first = {"use_cache=False": {16: 0.1, 64: 0.2}, "DynamicCache": {64: 0.21, 16: 0.11}}
    fig = plot_generate_time(steps, first, current=64, max_tokens=128, title="t", verdicts=["v"])
    assert isinstance(fig, Figure)
    ax, ax_first = fig.axes
    curves, circled = curves_and_circles(ax)
    assert list(curves[0].get_xdata()) == [16, 64]
    assert list(curves[0].get_ydata()) == pytest.approx([100.0, 200.0])
    assert [list(line.get_xdata()) for line in circled] == [[64], [64]]
    assert list(curves[1].get_ydata()) == pytest.approx([60.0, 60.0])
    firsts = [y for line in ax_first.get_lines() for y in line.get_ydata()]
    assert firsts == pytest.approx([100.0, 200.0, 110.0, 210.0])
    assert fig._suptitle.get_text() == "t" and fig.texts[-1].get_text() == "v"
    assert ax.get_xlim() == ax_first.get_xlim() == (0, 128 * 1.05)


def test_a_current_setting_not_measured_is_not_circled():
    ax = plot_generate_time({"a": {4: Timing("a", [1.0])}}, {"a": {4: 2.0}}, current=8).axes[0]
    assert not curves_and_circles(ax)[1]


def test_each_series_takes_a_series_colour():
    from kvlab.plots.palette import series

    steps = {"a": {4: Timing("a", [1.0])}, "b": {4: Timing("b", [0.5])}}
    ax, ax_first = plot_generate_time(steps, {"a": {4: 1.0}, "b": {4: 0.5}}).axes
    assert [line.get_color() for line in curves_and_circles(ax)[0]] == [series(0), series(1)]
    assert [line.get_color() for line in ax_first.get_lines()] == [series(0), series(1)]
