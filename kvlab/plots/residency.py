"""What an offloaded cache keeps on the accelerator at each step's peak (`kvlab.measure.residency`), next to the
whole cache at that moment."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from kvlab.i18n import _, number
from kvlab.measure.residency import device_bytes_by_step
from kvlab.plots._figure import dodged, legend_beside, subplots
from kvlab.plots.palette import series
from kvlab.recording.trace import Trace
from kvlab.units import binary_unit


def plot_device_bytes(traces: Trace | dict[str, Trace], title: str | None = None) -> Figure:
    """Grouped bars per step, one per trace (settings side by side): the device peak, its sliding layers' part
    hatched; black ticks: the whole cache (device and CPU) then."""
    named = {_("cache"): traces} if isinstance(traces, Trace) else dict(traces)
    by_label = {label: device_bytes_by_step(trace) for label, trace in named.items()}
    fig, ax = subplots(figsize=(10, 4))
    peaks = [max(r["device_peak_bytes"], r["cache_bytes_at_peak"]) for rows in by_label.values() for r in rows]
    unit, scale = binary_unit(max(peaks, default=0))  # KiB for a tiny model, MiB or GiB for a real one
    top = 0.0
    for n, (label, rows) in enumerate(by_label.items()):
        colour = series(n)
        xs, width = dodged(len(named), n, [r["step"] for r in rows])
        sliding_bytes = [r.get("device_bytes_by_layer_kind", {}).get("sliding", 0) for r in rows]
        other = [(r["device_peak_bytes"] - b) / scale for r, b in zip(rows, sliding_bytes)]
        sliding = [b / scale for b in sliding_bytes]
        ax.bar(xs, other, width=width, color=colour, alpha=0.8, label=label)
        ax.bar(xs, sliding, width=width, bottom=other, color=colour, alpha=0.35, hatch="//")
        whole = [r["cache_bytes_at_peak"] / scale for r in rows]
        ax.hlines(whole, xs - width / 2, xs + width / 2, color="k", lw=2, zorder=3)
        top = max([top, *whole])
        for x, r in zip(xs, rows):
            share = 100 * r["device_peak_bytes"] / r["cache_bytes_at_peak"] if r["cache_bytes_at_peak"] else 0
            ax.annotate(f"{number(share)}%", (x, r["device_peak_bytes"] / scale), ha="center", va="bottom", fontsize=8)
    handles = ax.get_legend_handles_labels()[0]
    handles += [
        Patch(facecolor="white", edgecolor="k", hatch="//", label=_("sliding layers' part")),
        Line2D([], [], color="k", lw=2, label=_("whole cache at that moment")),
    ]
    legend_beside(ax, handles=handles, fontsize=8)  # outside: covers no bar
    ax.set_xlabel(_("step (0 = prefill)"))
    ax.set_xticks(sorted({r["step"] for rows in by_label.values() for r in rows}))
    ax.set_ylabel(_("{unit} on the device at the step's peak").format(unit=unit))
    ax.set_ylim(0, 1.1 * top)  # room for the share labels above the bars
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(title or _("Device-resident cache bytes per step (% of the whole cache)"))
    fig.tight_layout()
    return fig
