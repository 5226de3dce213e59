import sys

import pytest
from matplotlib.figure import Figure

from kvlab.plots.generate_time import plot_generate_time


def test_ms_per_token_and_totals_for_every_setting_measured():
    seconds = {"use_cache=False": {8: 0.8, 16: 2.4}, "DynamicCache": {16: 0.32, 8: 0.16}}
    fig = plot_generate_time(seconds, current=16, max_tokens=40, title="t")
    assert isinstance(fig, Figure)
    ax, ax_total = fig.axes
    lines = ax.get_lines()  # per label: the curve, then the circled current point
    within = 2 * sys.float_info.epsilon  # ms per token: seconds / tokens * 1000, two roundings
    assert list(lines[0].get_xdata()) == [8, 16]
    assert list(lines[0].get_ydata()) == pytest.approx([100.0, 150.0], rel=within)
    assert list(lines[1].get_xdata()) == [16] and lines[1].get_fillstyle() == "none"
    assert list(lines[2].get_ydata()) == pytest.approx([20.0, 20.0], rel=within)
    assert [list(line.get_ydata()) for line in ax_total.get_lines()] == [[0.8, 2.4], [0.16, 0.32]]
    assert fig._suptitle.get_text() == "t"
    assert ax.get_xlim() == ax_total.get_xlim() == (0, 42.0)


def test_a_current_setting_not_measured_is_not_circled():
    ax = plot_generate_time({"a": {4: 1.0}}, current=8).axes[0]
    assert len(ax.get_lines()) == 1


def test_each_series_takes_a_series_colour():
    from kvlab.plots.palette import series

    ax, ax_total = plot_generate_time({"a": {4: 1.0}, "b": {4: 0.5}}).axes
    assert [line.get_color() for line in ax.get_lines()] == [series(0), series(1)]
    assert [line.get_color() for line in ax_total.get_lines()] == [series(0), series(1)]
