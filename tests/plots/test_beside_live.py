"""kvlab.plots.beside_live: meta bytes beside live bytes, two bars per layer kind, the verdict above each pair."""

import pytest

from kvlab.i18n import LANGUAGES, set_language
from kvlab.plots.beside_live import plot_beside_live
from kvlab.size.beside_live import KindRow
from tools.figure_check import overflowing_texts

ROWS = [KindRow("linear", 3, 18_432, 18_432), KindRow("full", 1, 3_840, 3_000)]


def test_each_kind_has_its_meta_and_live_bar_and_its_verdict():
    fig = plot_beside_live(ROWS)
    ax = fig.axes[0]
    assert [round(p.get_height() * 1024) for p in ax.patches] == [18_432, 18_432, 3_840, 3_000]  # in KiB
    assert ax.get_ylabel() == "cache bytes at the end (KiB)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["linear\n3 layers", "full\n1 layer"]
    assert [t.get_text() for t in ax.texts if t.get_text() in ("exact", "differs")] == ["exact", "differs"]


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_notebook_10s_control_fits_its_figure_in_both_languages(language):
    set_language(language)
    try:
        fig = plot_beside_live(ROWS, title="qwen3_next, tiny: meta device beside a live generation (16 tokens)")
        assert overflowing_texts(fig) == []
        fig.canvas.draw()
        ax = fig.axes[0]
        assert ax.get_legend().get_window_extent().y1 <= ax.get_window_extent().y0  # under the bars
    finally:
        set_language(None)
