"""The offloading schedule (`kvlab.measure.residency`) as a timeline of which layer is on the accelerator when,
in the order the cache saw events, not wall time, so the picture is the same on any machine."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from kvlab.i18n import N_, _
from kvlab.measure.residency import resident_intervals, schedule
from kvlab.plots._figure import legend_beside, subplots
from kvlab.plots.palette import series
from kvlab.recording.trace import Trace

RESIDENT, KEPT = series(0), series(4)  # not the states' colours: red means "cropped", grey "masked"
MOVES = {N_("prefetch"): ("^", series(2)), N_("offload"): ("v", series(3))}


def plot_timeline(trace: Trace, steps: tuple[int, int] | None = (1, 2), title: str | None = None) -> Figure:
    """Per layer (rows): resident intervals as bars, prefetches ▲, offloads ▼, updates as dots, over the window
    of `steps` (default: two decode steps) so that single moves stay readable."""
    events = schedule(trace, steps)
    fig, ax = subplots(figsize=(10.5, 0.22 * max(e["layer_idx"] for e in events) + 2.5) if events else (10.5, 3))
    kinds = set()
    for r in resident_intervals(trace, steps):
        kept = bool(r.get("never_offloaded"))
        kinds.add(kept)
        colour = KEPT if kept else RESIDENT
        ax.barh(r["layer_idx"], r["end"] - r["start"], left=r["start"], height=0.6, color=colour, alpha=0.35)
    for direction, (marker, colour) in MOVES.items():
        xs = [i for i, e in enumerate(events) if e["type"] == "transfer" and e["direction"] == direction]
        layers = [events[i]["layer_idx"] for i in xs]
        ax.scatter(xs, layers, marker=marker, color=colour, s=22, label=_(direction), zorder=3)
    xs = [i for i, e in enumerate(events) if e["type"] == "update"]
    ax.scatter(xs, [events[i]["layer_idx"] for i in xs], marker="o", color="k", s=8, label=_("update"), zorder=3)
    for i in range(1, len(events)):
        if events[i]["step"] != events[i - 1]["step"]:
            ax.axvline(i - 0.5, color="k", ls=":", lw=1)
    handles = ax.get_legend_handles_labels()[0]
    if False in kinds:
        handles.append(Patch(color=RESIDENT, alpha=0.35, label=_("resident (offloaded between uses)")))
    if True in kinds:
        handles.append(Patch(color=KEPT, alpha=0.35, label=_("resident (never offloaded)")))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.invert_yaxis()
    ax.set_xlabel(_("event order (dotted lines: step boundaries)"))
    ax.set_ylabel(_("layer"))
    legend_beside(ax, handles=handles, fontsize=8)
    ax.set_title(title or _("Offload / prefetch timeline"))
    fig.tight_layout()
    return fig
