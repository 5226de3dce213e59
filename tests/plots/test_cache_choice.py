"""kvlab.plots.cache_choice: one live run beside the calculator, and its cache length per decoding call."""

from kvlab.plots.cache_choice import plot_cache_choice

MiB = 2**20


def test_the_live_run_is_marked_beside_the_calculated_kinds():
    calculated = {"dynamic": 3 * MiB, "static": 4 * MiB, "quantized": 1 * MiB}
    fig = plot_cache_choice("quantized", 1 * MiB, calculated, [0, 1, 2, 0, 1], (3, 5))
    bytes_ax, keys_ax = fig.axes
    assert [p.get_height() for p in bytes_ax.patches] == [3, 4, 1]
    assert list(bytes_ax.lines[0].get_xdata()) == [2] and list(bytes_ax.lines[0].get_ydata()) == [1]
    assert bytes_ax.get_ylabel() == "cache bytes at the end (MiB)"
    assert list(keys_ax.lines[0].get_ydata()) == [0, 1, 2, 0, 1]
    assert keys_ax.get_title() == "quantized: 3 distinct signatures over 5 decoding calls"
    one = plot_cache_choice("static", 4 * MiB, calculated, [9, 9], (1, 2)).axes[1]
    assert one.get_title() == "static: 1 distinct signature over 2 decoding calls"


def test_the_legend_sits_below_the_bars_and_the_colours_are_series_colours():
    from kvlab.plots.palette import CROPPED, MASKED, series

    calculated = {"dynamic": 3 * MiB, "static": 3 * MiB, "quantized": 1 * MiB}
    fig = plot_cache_choice("quantized", 1 * MiB, calculated, [0, 1, 2], (3, 3))
    bytes_ax = fig.axes[0]
    fig.canvas.draw()
    assert bytes_ax.get_legend().get_window_extent().y1 <= bytes_ax.get_window_extent().y0
    marker = bytes_ax.lines[0].get_color()
    assert marker == series(1) and marker not in (CROPPED, MASKED)
