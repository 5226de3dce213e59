"""kvlab.plots.cache_choice: one live run beside the calculator, and its cache length per decoding call."""

import pytest

from kvlab.i18n import _, set_language
from kvlab.plots.cache_choice import plot_cache_choice
from tools.figure_check import overflowing_texts

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


@pytest.mark.parametrize(
    ("language", "title"),
    [("en", "SmolLM2, 48-token prompt + 24 new tokens"), ("pt-BR", "SmolLM2, prompt de 48 tokens + 24 tokens novos")],
)
def test_notebook_10s_control_fits_its_figure_in_both_languages(language, title):
    """Notebook 10's control at its default (quantized, 24 new tokens; titles as notebooks/10 and pt-BR/10 pass
    them): the Portuguese panel title ran past the figure, and the y label, taller than its axes, into it."""
    set_language(language)
    try:
        calculated = {"dynamic": 3_270_000, "static": 3_270_000, "quantized": 870_000}
        keys = [call % 8 for call in range(23)]  # the residual fills up to 7 keys and is quantized away
        fig = plot_cache_choice("quantized", 870_000, calculated, keys, (8, 23), title=title)
        assert overflowing_texts(fig) == []
        bytes_ax, keys_ax = fig.axes
        ylabel = keys_ax.get_ylabel()
        assert ylabel.split() == _("cache keys' sequence length").split()  # the same words, wrapped to the axes
        assert keys_ax.yaxis.label.get_window_extent().height <= keys_ax.get_window_extent().height
        assert bytes_ax.get_legend().get_window_extent().y1 <= bytes_ax.get_window_extent().y0  # under the bars
    finally:
        set_language(None)


def test_the_cache_kinds_are_words_of_the_readers_language():
    """The ticks and the live marker's label read "dinâmico / estático / quantizado" in Portuguese, not the API
    values the menu keeps."""
    from kvlab.i18n import cache_kind_label

    set_language("pt-BR")
    try:
        calculated = {"dynamic": 3 * MiB, "static": 3 * MiB, "quantized": 1 * MiB}
        fig = plot_cache_choice("quantized", 1 * MiB, calculated, [0, 1, 2], (3, 3))
        bytes_ax, keys_ax = fig.axes
        ticks = [t.get_text() for t in bytes_ax.get_xticklabels()]
        assert ticks == [cache_kind_label(k) for k in calculated]
        assert keys_ax.get_title().startswith(cache_kind_label("quantized"))
    finally:
        set_language(None)
