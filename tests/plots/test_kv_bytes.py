"""kvlab.plots.kv_bytes: grouped horizontal byte bars with an automatic unit."""

from kvlab.plots.kv_bytes import plot_bytes


def test_bars_are_scaled_and_grouped():
    fig = plot_bytes({"a": {"4k": 2**30, "32k": 8 * 2**30}, "b": {"4k": 2**29, "32k": 4 * 2**30}})
    ax = fig.axes[0]
    assert sorted(round(p.get_width(), 2) for p in ax.patches) == [0.5, 1.0, 4.0, 8.0]
    assert ax.get_xlabel() == "bytes (GiB)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["4k", "32k"]


def test_marked_bars_are_hatched_and_named_and_the_legend_is_outside_the_axes():
    from matplotlib.colors import to_hex

    from kvlab.plots.palette import series

    values = {"a": {"4k": 2**30, "32k": 8 * 2**30}, "b": {"4k": 2**29, "32k": 4 * 2**30}}
    fig = plot_bytes(values, marked={("a", "32k")}, marked_label="past the context")
    ax = fig.axes[0]
    hatched = [(round(p.get_width(), 2), to_hex(p.get_facecolor())) for p in ax.patches if p.get_hatch()]
    assert hatched == [(8.0, series(1))]  # only a's 32k bar, in the 32k series' colour
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["4k", "32k", "past the context"]
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1


def test_bar_inches_sets_the_height_per_bar():
    values = {name: {"4k": 2**30, "32k": 8 * 2**30, "peak": 9 * 2**30} for name in "abcdefghi"}  # 27 bars
    default, compact = plot_bytes(values).get_size_inches()[1], plot_bytes(values, bar_inches=0.3).get_size_inches()[1]
    assert (round(default, 2), round(compact, 2)) == (0.5 * 27 + 1.5, round(0.3 * 27 + 1.5, 2))


def test_a_title_wider_than_its_panel_wraps_instead_of_running_out():
    from tools.figure_check import overflowing_texts

    title = "DynamicCache depois de um prompt de 4k / 32k tokens, e o pico do pré-preenchimento de 32k, lote de 1"
    fig = plot_bytes({"a": {"4k": 2**30, "32k": 2**31}, "b": {"4k": 2**29}}, title=title)
    assert overflowing_texts(fig) == []
    assert fig.axes[0].get_title().replace("\n", " ") == title
