"""Tokens seen, live and stored per layer (see `kvlab.measure.layer_lengths`), with the window marked."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvlab.i18n import C_, N_, _, layer_kind_label, number
from kvlab.measure.layer_lengths import LayerLength
from kvlab.plots._figure import subplots
from kvlab.plots.palette import LAYER_KIND_COLORS


def plot_layer_lengths(
    lengths: list[LayerLength], window: int | None = None, title: str | None = None, window_label: str = N_("window")
) -> Figure:
    """Per layer: an outlined bar for tokens seen, a pale bar for storage held, a solid bar for live tokens, in the
    layer kind's colour; `window` (a sliding window, a chunk size) is a dashed line."""
    fig, ax = subplots(figsize=(9, 3.6))
    x = [length.layer_idx for length in lengths]
    colors = [LAYER_KIND_COLORS.get(length.layer_kind, "#999999") for length in lengths]
    ax.bar(x, [length.seen for length in lengths], width=0.8, fill=False, edgecolor="#555555", label=_("seen"))
    stored = [length.slots_stored for length in lengths]
    ax.bar(x, stored, width=0.6, color=colors, alpha=0.35, label=_("stored (bytes)"))
    live_bars = ax.bar(
        x, [length.live for length in lengths], width=0.35, color=colors, label=C_("tokens of a layer", "live")
    )
    # 511 live under a 512 window is one pixel at this scale: each live bar carries its count
    counts = [number(length.live) if length.live else "" for length in lengths]
    ax.bar_label(live_bars, labels=counts, fontsize=6, label_type="center", rotation=90, color="white")
    if window:
        ax.axhline(window, color="black", linestyle="--", linewidth=1, label=f"{_(window_label)} {number(window)}")
    handles = ax.get_legend_handles_labels()[0]
    handles += [
        Patch(color=color, label=_("{layer_kind} layer").format(layer_kind=layer_kind_label(layer_kind)))
        for layer_kind, color in LAYER_KIND_COLORS.items()
        if any(length.layer_kind == layer_kind for length in lengths)
    ]
    ax.set_xticks(x)
    ax.set_xlabel(_("layer"))
    ax.set_ylabel(_("tokens"))
    ax.set_ylim(0, max(max(length.seen for length in lengths), window or 0) * 1.4)
    ax.legend(handles=handles, fontsize=8, ncol=4, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
