"""kvlab.plots.turns: per-turn prefill bars and the id alignment strip."""

import matplotlib
import matplotlib.pyplot as plt

from kvlab.plots.palette import CACHED, CROPPED, FREE
from kvlab.plots.turns import alignment_counts, plot_id_alignment

matplotlib.use("Agg")


def test_alignment_counts_and_strip():
    cached, prompt = [1, 2, 3, 4], [1, 2, 9, 4, 5, 6]
    assert alignment_counts(cached, prompt) == {"match": 3, "differ": 1, "new": 2}
    fig = plot_id_alignment(cached, prompt)
    colours = [matplotlib.colors.to_hex(p.get_facecolor()) for p in fig.axes[0].patches]
    assert colours == [CACHED, CACHED, CROPPED, CACHED, FREE, FREE]  # stale is the red a crop removes
    plt.close(fig)


def test_plot_turn_prefills_labels_each_bar_with_its_count():
    from kvlab.plots.turns import plot_turn_prefills

    fig = plot_turn_prefills({"reused": [40, 20, 18], "fresh": [40, 80, 120]}, title="t")
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [40, 20, 18, 40, 80, 120]
    assert [t.get_text() for t in ax.texts] == ["40", "20", "18", "40", "80", "120"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["turn 1", "turn 2", "turn 3"]
    assert ax.get_title() == "t"
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1  # outside: it covers no bar


def test_the_strip_and_the_bars_write_numbers_as_the_reader_does():
    from kvlab.i18n import set_language
    from kvlab.plots.turns import plot_turn_prefills
    from tools.figure_check import visible_texts

    set_language("pt-BR")
    try:
        bars = visible_texts(plot_turn_prefills({"nova": [1500, 20]}, title="t"))
        strip = visible_texts(plot_id_alignment(range(1200), range(1300)))
    finally:
        set_language(None)
    assert "1.500" in bars["texts"]
    assert "1.200" in strip["ticks"][0]  # the token positions, grouped the Portuguese way
