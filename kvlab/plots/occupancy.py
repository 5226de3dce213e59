"""Layer × step heatmaps of the slots each layer holds live and the tokens it has evicted: full layers deepen
step after step, sliding layers saturate at the window while their evictions climb."""

from __future__ import annotations

from itertools import accumulate

import numpy as np
from matplotlib.figure import Figure

from kvlab.i18n import _, layer_kind_label, number
from kvlab.plots._figure import NumberFormatter, subplots
from kvlab.recording.trace import Trace


def evictions(trace: Trace) -> list[list[int]]:
    """Cumulative tokens evicted per layer (rows, `Trace.occupancy()` order) per step (columns)."""
    rows = sorted({(e["role"], e["layer_idx"]) for e in trace.updates}, key=lambda k: (k[0] != "self", k[1]))
    steps = sorted({e["step"] for e in trace.updates})
    index, col = {k: i for i, k in enumerate(rows)}, {s: j for j, s in enumerate(steps)}
    grid = [[0] * len(steps) for _ in rows]
    for e in trace.updates:
        grid[index[(e["role"], e["layer_idx"])]][col[e["step"]]] = e["tokens_evicted"]
    return [list(accumulate(row, max)) for row in grid]


def layer_labels(trace: Trace) -> list[str]:
    """'L3 sliding' style labels, in the row order of `Trace.occupancy()`."""
    final = trace.final_layers()
    return [
        f"{'x' if e['role'] == 'cross' else 'L'}{e['layer_idx']} {layer_kind_label(e['layer_kind'])}" for e in final
    ]


def _write_ends(ax, grid: np.ndarray, image) -> None:
    """Each row's value at its first and last step, written in the cells: a colour scale stretched over the full
    layers' growth (520 to 543) paints a capped sliding row (511) the same darkest colour."""
    columns = sorted({0, grid.shape[1] - 1})
    for row, values in enumerate(grid):
        for column in columns:
            red, green, blue, _alpha = image.cmap(image.norm(values[column]))
            ink = "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
            ax.text(column, row, number(values[column]), ha="center", va="center", fontsize=7, color=ink)


def plot_occupancy(trace: Trace, show_evictions: bool = True, title: str | None = None) -> Figure:
    """Heatmap of live slots per layer and step; with `show_evictions`, a second heatmap of tokens evicted."""
    live = np.array(trace.occupancy())
    panels = [(_("live slots"), live, "viridis")]
    if show_evictions:
        panels.append((_("tokens evicted (cumulative)"), np.array(evictions(trace)), "magma"))
    labels = layer_labels(trace)
    fig, axes = subplots(1, len(panels), figsize=(5.5 * len(panels), 0.25 * len(labels) + 2), squeeze=False)
    for ax, (name, grid, cmap) in zip(axes[0], panels):
        image = ax.imshow(grid, aspect="auto", cmap=cmap, interpolation="nearest")
        if grid is live:
            _write_ends(ax, grid, image)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xlabel(_("step (0 = prefill)"))
        ax.set_title(name)
        fig.colorbar(image, ax=ax, label=_("tokens"), format=NumberFormatter())
    fig.suptitle(title or _("Cache occupancy per layer and step"))
    fig.tight_layout()
    return fig
