"""Which token positions each layer holds (a row per layer, a column per position), and which the next token
sees: a sliding layer recording its past keeps positions it no longer attends to, so a crop can bring them back."""

from __future__ import annotations

from functools import partial

import numpy as np
from matplotlib.colors import ListedColormap, to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from kvlab.i18n import N_, _, layer_kind_label, number
from kvlab.plots import palette
from kvlab.plots._figure import legend_below, localise_ticks, subplots, tight_layout_fitted
from kvlab.units import binary_unit

NOT_CACHED, LIVE, VISIBLE, CROPPED = 0, 1, 2, 3
RECORDED = to_hex(0.45 * np.array(to_rgb(palette.LIVE)) + 0.55)  # live, paler: held but not attended
COLOURS = (palette.EVICTED, RECORDED, palette.LIVE, palette.CROPPED)
LABELS = (
    N_("seen, dropped by the window"),
    N_("held, not attended (recorded past)"),
    N_("held and attended by the next token"),
    N_("removed by the crop"),
)


def positions_grid(rows: list[dict], cropped: int = 0) -> np.ndarray:
    """(layers, positions) array of states from `kvlab.measure.rollback.cached_positions` rows, read after a crop
    that removed the last `cropped` positions."""
    seen = max((r["seen"] for r in rows), default=0)
    grid = np.full((len(rows), seen + cropped), NOT_CACHED, dtype=int)
    for i, row in enumerate(rows):
        grid[i, row["positions_live"]] = LIVE
        grid[i, row["positions_visible"]] = VISIBLE
        grid[i, row["seen"] : row["seen"] + cropped] = CROPPED
    return grid


def plot_cached_positions(rows: list[dict], title: str = N_("Cached positions per layer"), ax=None, cropped: int = 0):
    """Draw `cached_positions(cache)` rows (with `cropped`, the positions a crop just removed), on `ax` or a figure
    of its own. The legend, of the states shown, goes under the x label: beside, it would take the grid's width."""
    grid = positions_grid(rows, cropped)
    own = ax is None
    if own:
        fig, ax = subplots(figsize=(max(6.0, 0.22 * grid.shape[1] + 2), 0.35 * len(rows) + 1.1))
    else:
        fig = localise_ticks(ax).figure  # positions past 999 grouped as the reader writes them
    ax.imshow(grid, cmap=ListedColormap(COLOURS), vmin=0, vmax=len(COLOURS) - 1, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(rows)), [f"{r['layer_idx']} {layer_kind_label(r['layer_kind'])}" for r in rows])
    ax.set_xlabel(_("token position"))
    ax.set_ylabel(_("layer"))
    ax.set_title(_(title))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # positions are whole numbers
    ax.set_xticks(np.arange(-0.5, grid.shape[1], 1), minor=True)
    ax.grid(which="minor", axis="x", color="white", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    tight_layout_fitted(fig, grow=own)  # a long title (a refused crop's reason) wraps to the axes' width
    bottom = ax.get_tightbbox().y0  # of the x label, before the legend hangs under it
    handles = [Patch(color=COLOURS[state], label=_(LABELS[state])) for state in sorted(set(grid.ravel().tolist()))]
    legend_below(ax, handles, fontsize="small", frameon=False)
    if own:  # a figure of our own grows by the legend's rows, so the picture keeps the height of its rows
        width, height = fig.get_size_inches()
        fig.set_size_inches(width, height + (bottom - ax.get_tightbbox().y0) / fig.dpi)
    fig.tight_layout()  # with room for the legend under the x label
    return fig


def plot_holdings(stages: dict[str, dict], title: str = N_("What each layer kind holds")) -> Figure:
    """From `{stage label: kvlab.measure.rollback.holdings(cache)}`: a row per layer kind, the slots one layer
    holds (left) and the bytes all its layers keep alive (right), stage by stage. A crop's steps are small beside
    the totals (523 -> 511 slots), so each panel is a line over its own range, every point labelled."""
    kinds = sorted({layer_kind for holding in stages.values() for layer_kind in holding})
    # the bytes' ticks as the point labels write them: "0,620" beside "0,60" in pt-BR
    fig, axes = subplots(len(kinds), 2, figsize=(10, 1.2 + 2.4 * len(kinds)), squeeze=False)
    x = np.arange(len(stages))
    for (slots_ax, bytes_ax), layer_kind in zip(axes, kinds):
        rows = [holding.get(layer_kind, {}) for holding in stages.values()]
        layers = next(row["layers"] for row in rows if row)
        colour = palette.LAYER_KIND_COLORS.get(layer_kind, "#000000")
        slots = [row.get("slots_live", 0) for row in rows]
        unit, scale = binary_unit(max(row.get("bytes_all_layers", 0) for row in rows))  # KiB, MiB: the row's own
        held = [row.get("bytes_all_layers", 0) / scale for row in rows]
        slots_title = _("{layer_kind}: slots held by one layer").format(layer_kind=layer_kind_label(layer_kind))
        bytes_title = _("{layer_kind} ({layers} layers): storage of all of them").format(
            layer_kind=layer_kind_label(layer_kind, plural=True),  # agrees with "camadas" in pt-BR
            layers=layers,
        )
        for ax, values, style, heading, ylabel, shown in (
            (slots_ax, slots, "o-", slots_title, _("slots"), number),  # 1.024 slots in pt-BR
            (bytes_ax, held, "s-", bytes_title, unit, partial(number, decimals=2, grouping=False)),
        ):
            ax.plot(x, values, style, color=colour)
            ax.set_title(heading, fontsize=10)
            for i, v in enumerate(values):
                ax.annotate(shown(v), (i, v), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
            pad = max((max(values) - min(values)) * 0.25, abs(max(values)) * 0.02, 1e-9)
            ax.set_ylim(min(values) - pad, max(values) + 2 * pad)  # the data's own range: a 2 % step is seen
            ax.set_xticks(x, list(stages), rotation=15, ha="right", fontsize="small")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
    return tight_layout_fitted(fig, title=_(title))
