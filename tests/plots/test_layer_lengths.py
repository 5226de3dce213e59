from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvlab.i18n import set_language
from kvlab.measure.layer_lengths import LayerLength
from kvlab.plots.layer_lengths import plot_layer_lengths

LENGTHS = [
    LayerLength(0, "sliding", 12, 7, 12),
    LayerLength(1, "full", 12, 12, 12),
    LayerLength(2, "chunked", 12, 7, 8),
]


def test_three_bars_per_layer_heights_from_the_lengths_and_the_window_line():
    fig = plot_layer_lengths(LENGTHS, window=8, title="t")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [12, 12, 12, 12, 12, 8, 7, 12, 7]  # seen, stored, live; three layers each
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [8]
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    colors = {
        t.get_text(): h.get_facecolor()[:3]
        for t, h in zip(legend.get_texts(), legend.legend_handles)
        if isinstance(h, Patch)
    }
    assert colors["sliding layer"] == (0xE6 / 255, 0x55 / 255, 0x0D / 255)
    assert colors["chunked layer"] == (0x31 / 255, 0xA3 / 255, 0x54 / 255)
    assert sorted(labels) == sorted(
        ["seen", "stored (bytes)", "live", "window 8", "full layer", "sliding layer", "chunked layer"]
    )
    assert ax.get_title() == "t"
    assert [t.get_text() for t in ax.texts] == ["7", "12", "7"]  # each live bar carries its count


def test_the_window_line_can_be_named_for_chunks():
    ax = plot_layer_lengths(LENGTHS, window=8, window_label="chunk").axes[0]
    assert "chunk 8" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_without_a_window_no_line():
    ax = plot_layer_lengths(LENGTHS[1:2]).axes[0]
    assert ax.get_lines() == []
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["full layer", "live", "seen", "stored (bytes)"]


def test_portuguese_legend_names_the_layer_kinds_and_groups_counts():
    lengths = [LayerLength(0, "sliding", 1500, 1024, 1500), LayerLength(1, "full", 1500, 1500, 1500)]
    set_language("pt-BR")
    try:
        ax = plot_layer_lengths(lengths, window=1024).axes[0]
    finally:
        set_language(None)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "camada deslizante" in labels and "camada completa" in labels
    assert not any("sliding" in label for label in labels)
    assert [t.get_text() for t in ax.texts] == ["1.024", "1.500"]  # each live bar's count, in the reader's marks
