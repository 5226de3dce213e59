"""The meta-device size beside a live run's, per layer kind (`kvlab.size.beside_live` rows). Both bars of a kind
take its colour (the live one hatched): one quantity measured two ways, so the pair reads as one kind."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvlab.i18n import _, layer_kind_label, number
from kvlab.plots._figure import legend_below, subplots, tight_layout_fitted
from kvlab.plots.palette import LAYER_KIND_COLORS, series
from kvlab.units import binary_unit

WIDTH = 0.38  # each of the two bars of a kind; the pair leaves a gap to the next kind


def _kind_label(kind: str, layers: int) -> str:
    label = _("{kind}\n{layers} layer") if layers == 1 else _("{kind}\n{layers} layers")
    return label.format(kind=layer_kind_label(kind, plural=layers != 1), layers=layers)


def plot_beside_live(rows, title: str = "") -> Figure:
    """`rows` are `KindRow`s (kind, layers, meta_bytes, live_bytes, exact): a pair of bars per kind, "exact" or
    "differs" above it."""
    fig, ax = subplots(1, 1, figsize=(7, 3.8))
    largest = max([max(r.meta_bytes, r.live_bytes) for r in rows], default=1)
    unit, scale = binary_unit(largest)
    for index, row in enumerate(rows):
        color = LAYER_KIND_COLORS.get(row.kind, series(index))
        meta = ax.bar(index - WIDTH / 2, row.meta_bytes / scale, WIDTH, color=color, edgecolor="black")
        live = ax.bar(index + WIDTH / 2, row.live_bytes / scale, WIDTH, color=color, alpha=0.5, hatch="//")
        for bars, held in ((meta, row.meta_bytes), (live, row.live_bytes)):
            ax.bar_label(bars, labels=[number(held / scale, 2, grouping=False)], fontsize="x-small")
        verdict = _("exact") if row.exact else _("differs")
        top = max(row.meta_bytes, row.live_bytes) / scale
        ax.annotate(verdict, (index, top), xytext=(0, 14), textcoords="offset points", ha="center", fontsize="small")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([_kind_label(row.kind, row.layers) for row in rows], fontsize="small")
    ax.set_ylabel(_("cache bytes at the end ({unit})").format(unit=unit))
    ax.set_ylim(0, 1.2 * largest / scale)  # room above
    if title:
        ax.set_title(title, fontsize=10)
    handles = [
        Patch(facecolor="white", edgecolor="black", label=_("meta device (transformers' cache)")),
        Patch(facecolor="white", edgecolor="grey", hatch="//", label=_("live tiny model (kvlab.watch)")),
    ]
    tight_layout_fitted(fig, grow=True)  # a title longer than the axes: wrapped
    legend_below(ax, handles, fontsize="small", frameon=False)  # under the kinds' names: it covers no bar
    return tight_layout_fitted(fig, grow=True)  # room for the legend
