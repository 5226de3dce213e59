"""kvlab.plots.positions: the cached-positions picture."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from kvlab.i18n import _, set_language
from kvlab.plots._figure import subplots
from kvlab.plots.positions import CROPPED, LIVE, NOT_CACHED, VISIBLE, plot_cached_positions, positions_grid
from tools.figure_check import overflowing_texts

ROWS = [
    {
        "layer_idx": 0,
        "layer_kind": "sliding",
        "seen": 6,
        "window": 3,
        "positions_live": [2, 3, 4, 5],
        "positions_visible": [4, 5],
    },
    {
        "layer_idx": 1,
        "layer_kind": "full",
        "seen": 6,
        "window": None,
        "positions_live": list(range(6)),
        "positions_visible": list(range(6)),
    },
]


REFUSED = (  # kvlab.caches.crop_rules' message, which notebook 07 titles its picture with (up to ", so")
    "crop({n}) refused: sliding layer {layer_idx} has seen {seen} tokens but keeps only its window of {window}, so the "
    "tokens a crop must restore are already evicted. A StaticCache cannot record the past; use a DynamicCache with "
    "cache.activate_past_recording() before generating to be able to roll back."
)


def test_grid_marks_live_and_visible_positions():
    grid = positions_grid(ROWS)
    assert grid.shape == (2, 6)
    assert grid[0].tolist() == [NOT_CACHED, NOT_CACHED, LIVE, LIVE, VISIBLE, VISIBLE]
    assert grid[1].tolist() == [VISIBLE] * 6


def test_positions_a_crop_removed_are_drawn_after_the_kept_ones():
    grid = positions_grid(ROWS, cropped=2)
    assert grid.shape == (2, 8)
    assert grid[0].tolist()[4:] == [VISIBLE, VISIBLE, CROPPED, CROPPED]
    assert grid[1].tolist() == [VISIBLE] * 6 + [CROPPED] * 2


def test_crop_red_is_the_palettes_and_the_legend_names_only_what_is_drawn():
    from kvlab.plots import palette

    fig = plot_cached_positions(ROWS, title="t", cropped=2)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[-1] == "removed by the crop" and len(labels) == 4
    handle = fig.axes[0].get_legend().legend_handles[-1]
    assert matplotlib.colors.to_hex(handle.get_facecolor()) == palette.CROPPED
    full_only = [ROWS[1]]
    assert [t.get_text() for t in plot_cached_positions(full_only).axes[0].get_legend().get_texts()] == [
        "held and attended by the next token"
    ]


def test_plot_returns_a_figure_with_one_row_per_layer():
    matplotlib.use("Agg")
    fig = plot_cached_positions(ROWS, title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0 sliding", "1 full"]
    assert ax.get_title() == "t"
    plt.close(fig)


def test_row_labels_name_the_layer_kind_in_the_readers_language():
    set_language("pt-BR")
    try:
        fig = plot_cached_positions(ROWS, title="t")
    finally:
        set_language(None)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["0 deslizante", "1 completa"]
    plt.close(fig)


@pytest.mark.parametrize(
    ("language", "title"),
    [
        ("en", "with past recording, after crop(-2): 6 tokens"),
        ("pt-BR", "com registro do passado, after crop(-2): 6 tokens"),  # as notebooks/pt-BR/07 titles it
    ],
)
def test_the_legend_hangs_under_the_x_label_inside_the_figure_in_both_languages(language, title):
    """A two-layer grid (6 inches wide) and notebook 07's 9 x 3.2 figure: the four states' legend ran off both
    sides and over the "token position" label; now its columns fit the axes, under the label."""
    set_language(language)
    try:
        own = plot_cached_positions(ROWS, title=title, cropped=2)
        given, ax = subplots(figsize=(9, 3.2))
        plot_cached_positions(ROWS * 2, title=title, ax=ax, cropped=2)
        refused, ax = subplots(figsize=(9, 3.2))  # titled as notebook 07 titles a refused crop: wider than the figure
        reason = _(REFUSED).format(n=-3, layer_idx=0, seen=20, window=4).split(", so")[0]
        plot_cached_positions(ROWS * 2, title=reason, ax=ax)
        assert overflowing_texts(refused) == []
        for fig in (own, given):
            assert overflowing_texts(fig) == []
            ax = fig.axes[0]
            legend = ax.get_legend()
            assert len(legend.get_texts()) == 4
            assert legend.get_window_extent().y1 <= ax.xaxis.label.get_window_extent().y0  # below the label
            assert legend.get_window_extent().width <= ax.get_window_extent().width
        plt.close(own)
    finally:
        set_language(None)


def test_holdings_plot_draws_slots_and_total_bytes_per_kind_and_stage():
    from kvlab.plots.positions import plot_holdings

    stages = {
        "before": {
            "full": {"layers": 2, "slots_live": 10, "bytes_all_layers": 4 * 2**20},
            "sliding": {"layers": 4, "slots_live": 7, "bytes_all_layers": 2 * 2**20},
        },
        "after crop(-3)": {
            "full": {"layers": 2, "slots_live": 7, "bytes_all_layers": 4 * 2**20},
            "sliding": {"layers": 4, "slots_live": 7, "bytes_all_layers": 2 * 2**20},
        },
    }
    fig = plot_holdings(stages, title="t")
    (full_slots, full_bytes), (sliding_slots, sliding_bytes) = (fig.axes[:2], fig.axes[2:])  # one row per kind
    assert list(full_slots.lines[0].get_ydata()) == [10, 7]
    assert list(full_bytes.lines[0].get_ydata()) == [4.0, 4.0]  # MiB, the binary unit kvlab prints
    assert full_bytes.get_ylabel() == "MiB"
    assert list(sliding_slots.lines[0].get_ydata()) == [7, 7]
    assert sliding_bytes.get_title() == "sliding (4 layers): storage of all of them"
    kib = {"before": {"full": {"layers": 2, "slots_live": 10, "bytes_all_layers": 40 * 2**10}}}
    tiny_bytes = plot_holdings(kib).axes[1]  # a tiny model's tens of KiB: drawn in KiB, not 0.04 MiB
    assert tiny_bytes.get_ylabel() == "KiB" and list(tiny_bytes.lines[0].get_ydata()) == [40.0]
    assert [t.get_text() for t in full_slots.texts] == ["10", "7"]  # every point carries its value
    assert fig._suptitle.get_text() == "t"


def test_holdings_axes_span_the_data_so_a_small_crop_is_visible():
    from kvlab.plots.positions import plot_holdings

    stages = {s: {"sliding": {"layers": 15, "slots_live": n, "bytes_all_layers": 16_000_000}} for s, n in
              (("fed", 523), ("crop(-3)", 511))}  # fmt: skip
    slots_ax = plot_holdings(stages).axes[0]
    low, high = slots_ax.get_ylim()
    assert 500 < low < 511 and 523 < high < 560  # 12 slots take a visible part of the axis, not 2 % of a bar


def test_holdings_ticks_and_point_labels_use_the_same_marks_in_portuguese():
    """The MiB axis under point labels "1,43": its ticks "1,430" too, not pyplot's "1.430"."""
    from kvlab.plots.positions import plot_holdings
    from tools.figure_check import visible_texts

    stages = {s: {"full": {"layers": 30, "slots_live": n, "bytes_all_layers": 1_500_000}} for s, n in
              (("depois", 13), ("crop(-3)", 10))}  # fmt: skip
    set_language("pt-BR")
    try:
        fig = plot_holdings(stages)
        shown = visible_texts(fig)
    finally:
        set_language(None)
    assert "1,43" in shown["texts"]  # 1 500 000 B = 1.43 MiB
    slots_ax, bytes_ax = fig.axes[:2]
    assert slots_ax.get_title() == "completa: posições guardadas por uma camada"
    assert bytes_ax.get_title() == "camadas completas (30): armazenamento de todas elas"  # plural, as "camadas" asks
    ticks = [label for labels in shown["ticks"] for label in labels]
    assert any("," in label for label in ticks) and not any("." in label for label in ticks)
