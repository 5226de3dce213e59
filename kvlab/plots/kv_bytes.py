"""Bytes side by side: horizontal bars per label, one per series (a context length, a cache). Sizes span orders
of magnitude between models, so the unit is picked from the largest and every bar carries its size."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvlab.i18n import N_, _, number
from kvlab.plots._figure import dodged, legend_beside, subplots, tight_layout_fitted
from kvlab.plots.palette import series as series_color
from kvlab.units import binary_unit


def plot_bytes(
    values: dict[str, dict[str, int]],
    title: str = N_("KV cache bytes"),
    marked: frozenset | set = frozenset(),
    marked_label: str = "",
    bar_inches: float = 0.5,
) -> Figure:
    """`{label: {series: bytes}}`: a group of bars per label, a colour per series; `marked` (label, series) pairs
    are hatched (say, a length past the model's context), and `marked_label` names the hatch in the legend.
    `bar_inches`: the height of one bar, for many series per label."""
    labels = list(values)
    series = list(dict.fromkeys(s for per_label in values.values() for s in per_label))
    largest = max((b for per_label in values.values() for b in per_label.values()), default=1)
    unit, scale = binary_unit(largest)
    fig, ax = subplots(figsize=(9, bar_inches * len(labels) * max(len(series), 1) + 1.5))
    y = np.arange(len(labels))
    for i, name in enumerate(series):
        sizes = [values[label].get(name, 0) / scale for label in labels]
        hatches = ["//" if (label, name) in marked else "" for label in labels]
        at, height = dodged(len(series), i, y)
        bars = ax.barh(
            at, sizes, height, label=name, color=series_color(i), hatch=hatches, edgecolor="black", linewidth=0
        )
        shown = [f"{number(s, 2, grouping=False)} {unit}" if s else "" for s in sizes]
        ax.bar_label(bars, labels=shown, fontsize="x-small", padding=2)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel(_("bytes ({unit})").format(unit=unit))
    ax.set_xlim(0, largest / scale * 1.2)
    handles = [Patch(facecolor=series_color(i)) for i in range(len(series))]  # plain: a hatched first bar is no key
    names = list(series)
    if marked and marked_label:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", linewidth=0.8))
        names.append(marked_label)
    if len(names) > 1:
        legend_beside(ax, handles, names, fontsize="small")
    ax.set_title(_(title))
    return tight_layout_fitted(fig, grow=True)  # a title wider than the panel (a Portuguese one) wraps
