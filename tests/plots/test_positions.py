"""kvlab.plots.positions: the cached-positions picture."""

import matplotlib
import matplotlib.pyplot as plt

from kvlab.plots.positions import LIVE, NOT_CACHED, VISIBLE, plot_cached_positions, positions_grid

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


def test_grid_marks_live_and_visible_positions():
    grid = positions_grid(ROWS)
    assert grid.shape == (2, 6)
    assert grid[0].tolist() == [NOT_CACHED, NOT_CACHED, LIVE, LIVE, VISIBLE, VISIBLE]
    assert grid[1].tolist() == [VISIBLE] * 6


def test_plot_returns_a_figure_with_one_row_per_layer():
    matplotlib.use("Agg")
    fig = plot_cached_positions(ROWS, title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0 sliding", "1 full"]
    assert ax.get_title() == "t"
    plt.close(fig)


def test_holdings_plot_draws_slots_and_total_bytes_per_kind_and_stage():
    from kvlab.plots.positions import plot_holdings

    stages = {
        "before": {
            "full": {"layers": 2, "slots_live": 10, "bytes_all_layers": 4_000_000},
            "sliding": {"layers": 4, "slots_live": 7, "bytes_all_layers": 2_000_000},
        },
        "after crop(-3)": {
            "full": {"layers": 2, "slots_live": 7, "bytes_all_layers": 4_000_000},
            "sliding": {"layers": 4, "slots_live": 7, "bytes_all_layers": 2_000_000},
        },
    }
    fig = plot_holdings(stages, title="t")
    slots_ax, bytes_ax = fig.axes
    assert [p.get_height() for p in slots_ax.patches] == [10, 7, 7, 7]  # full per stage, then sliding per stage
    assert [p.get_height() for p in bytes_ax.patches] == [4.0, 4.0, 2.0, 2.0]
    assert [t.get_text() for t in bytes_ax.get_legend().get_texts()] == ["full (2 layers)", "sliding (4 layers)"]
    assert fig._suptitle.get_text() == "t"
