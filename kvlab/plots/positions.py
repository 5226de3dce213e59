"""The "cached positions" picture: which token positions each layer holds, and which the next token sees.

One row per layer, one column per token position. A full-attention layer holds every position; a sliding layer
holds only its last `window - 1` (plus the token being computed). With past recording on, a sliding layer keeps
older positions it no longer attends to, so that a crop can bring them back: those show in a lighter colour.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

NOT_HELD, HELD, VISIBLE = 0, 1, 2
COLOURS = ("#f4f4f4", "#9ecae1", "#08519c")
LABELS = ("not in the cache", "held, not attended (recorded past)", "held and attended by the next token")


def positions_grid(rows: list[dict]) -> np.ndarray:
    """(layers, positions) array of NOT_HELD / HELD / VISIBLE from `kvlab.rollback.cached_positions` rows."""
    width = max((r["seen"] for r in rows), default=0)
    grid = np.full((len(rows), width), NOT_HELD, dtype=int)
    for i, row in enumerate(rows):
        grid[i, row["held"]] = HELD
        grid[i, row["visible"]] = VISIBLE
    return grid


def plot_cached_positions(rows: list[dict], title: str = "Cached positions per layer", ax=None):
    """Draw `cached_positions(cache)` rows; returns the Figure."""
    grid = positions_grid(rows)
    if ax is None:
        with plt.ioff():
            fig, ax = plt.subplots(figsize=(max(6.0, 0.22 * grid.shape[1] + 2), 0.35 * len(rows) + 1.6))
        plt.close(fig)  # shown once, by its return value; no pyplot state left open
    else:
        fig = ax.figure
    ax.imshow(grid, cmap=ListedColormap(COLOURS), vmin=0, vmax=2, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(rows)), [f"{r['layer_idx']} {r['kind']}" for r in rows])
    ax.set_xlabel("token position")
    ax.set_ylabel("layer")
    ax.set_title(title)
    ax.set_xticks(np.arange(-0.5, grid.shape[1], 1), minor=True)
    ax.grid(which="minor", axis="x", color="white", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    ax.legend(handles=[Patch(color=c, label=label) for c, label in zip(COLOURS, LABELS)],
              loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(rows) < 8 else -0.12), ncol=3,
              fontsize="small", frameon=False)  # fmt: skip
    fig.tight_layout()
    return fig
