"""The "cached positions" picture: which token positions each layer holds, and which the next token sees.

One row per layer, one column per token position. A full-attention layer holds every position; a sliding layer
holds only its last `window - 1` (plus the token being computed). With past recording on, a sliding layer keeps
older positions it no longer attends to, so that a crop can bring them back: those show in a lighter colour.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvlab.i18n import N_, _, number

NOT_CACHED, LIVE, VISIBLE = 0, 1, 2
COLOURS = ("#f4f4f4", "#9ecae1", "#08519c")
LABELS = (N_("not in the cache"), N_("held, not attended (recorded past)"), N_("held and attended by the next token"))


def positions_grid(rows: list[dict]) -> np.ndarray:
    """(layers, positions) array of NOT_CACHED / LIVE / VISIBLE from `kvlab.measure.rollback.cached_positions` rows."""
    width = max((r["seen"] for r in rows), default=0)
    grid = np.full((len(rows), width), NOT_CACHED, dtype=int)
    for i, row in enumerate(rows):
        grid[i, row["positions_live"]] = LIVE
        grid[i, row["positions_visible"]] = VISIBLE
    return grid


def plot_cached_positions(rows: list[dict], title: str = N_("Cached positions per layer"), ax=None):
    """Draw `cached_positions(cache)` rows; returns the Figure."""
    grid = positions_grid(rows)
    if ax is None:
        with plt.ioff():
            fig, ax = plt.subplots(figsize=(max(6.0, 0.22 * grid.shape[1] + 2), 0.35 * len(rows) + 1.6))
        plt.close(fig)  # shown once, by its return value; no pyplot state left open
    else:
        fig = ax.figure
    ax.imshow(grid, cmap=ListedColormap(COLOURS), vmin=0, vmax=2, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(rows)), [f"{r['layer_idx']} {r['layer_kind']}" for r in rows])
    ax.set_xlabel(_("token position"))
    ax.set_ylabel(_("layer"))
    ax.set_title(_(title))
    ax.set_xticks(np.arange(-0.5, grid.shape[1], 1), minor=True)
    ax.grid(which="minor", axis="x", color="white", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    ax.legend(
        handles=[Patch(color=c, label=_(label)) for c, label in zip(COLOURS, LABELS)],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35 if len(rows) < 8 else -0.12),
        ncol=3,
        fontsize="small",
        frameon=False,
    )
    fig.tight_layout()
    return fig


def plot_holdings(stages: dict[str, dict], title: str = N_("What each layer kind holds")) -> Figure:
    """Grouped bars from `{stage label: kvlab.measure.rollback.holdings(cache)}`: slots one layer holds (left) and the
    bytes of storage all layers of that kind keep alive (right). A crop shows as fewer slots, same bytes."""
    kinds = sorted({layer_kind for holding in stages.values() for layer_kind in holding})
    with plt.ioff():
        fig, (slots_ax, bytes_ax) = plt.subplots(1, 2, figsize=(10, 4.2))
    plt.close(fig)  # shown once, by its return value; no pyplot state left open
    width = 0.8 / max(len(kinds), 1)
    x = np.arange(len(stages))
    for i, layer_kind in enumerate(kinds):
        offset = x + (i - (len(kinds) - 1) / 2) * width
        rows = [holding.get(layer_kind, {}) for holding in stages.values()]
        layers = next(row["layers"] for row in rows if row)
        slots = slots_ax.bar(offset, [row.get("slots_live", 0) for row in rows], width, label=layer_kind)
        storage = bytes_ax.bar(
            offset,
            [row.get("bytes_all_layers", 0) / 1e6 for row in rows],
            width,
            label=_("{layer_kind} ({layers} layers)").format(layer_kind=layer_kind, layers=layers),
        )
        slots_ax.bar_label(slots, fmt="%d", fontsize=7)  # small changes (523 -> 511) are read, not seen
        bytes_ax.bar_label(storage, labels=[number(v, 2, grouping=False) for v in storage.datavalues], fontsize=7)
    for ax, ylabel in ((slots_ax, _("slots held by one layer")), (bytes_ax, _("storage, all layers (MB)"))):
        ax.set_xticks(x, list(stages), rotation=15, ha="right", fontsize="small")
        ax.set_ylabel(ylabel)
        ax.margins(y=0.12)
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=len(kinds), frameon=False)
    fig.suptitle(_(title))
    fig.tight_layout()
    return fig
