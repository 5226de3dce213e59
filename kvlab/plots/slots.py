"""Allocated vs live vs masked slots: the price of a fixed shape (a StaticCache allocates every slot up front,
and the empty ones are masked; a DynamicCache allocates what is live)."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, number
from kvlab.plots._figure import finish_beside, subplots
from kvlab.plots.palette import ALLOCATED, LIVE, MASKED
from kvlab.recording.trace import Trace


def plot_slots(trace: Trace, title: str | None = None) -> Figure:
    """Per step, summed over layers: live and masked slots stacked, allocated slots as a line on top."""
    rows = trace.slots_by_step()
    steps = [r["step"] for r in rows]
    live = [r["slots_live"] for r in rows]
    masked = [r["slots_masked"] for r in rows]
    fig, ax = subplots(figsize=(8.5, 4))
    ax.stackplot(steps, live, masked, labels=[_("live"), _("masked (allocated, empty)")], colors=[LIVE, MASKED])
    ax.plot(steps, [r["slots_allocated"] for r in rows], "-", color=ALLOCATED, lw=1.5, label=_("allocated"))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    title = title or _("Allocated vs live vs masked slots")
    return finish_beside(fig, ax, title, _("step (0 = prefill)"), _("slots, summed over layers"))


def run_slots(traces: dict[str, Trace]) -> list[dict]:
    """Final allocated / live / masked slots, waste % and bytes of each run (one row per label)."""
    fields = ("slots_allocated", "slots_live", "slots_masked", "waste_pct", "final_bytes")
    summaries = {label: trace.summary() for label, trace in traces.items()}
    return [{"run": label, **{f: s[f] for f in fields}} for label, s in summaries.items()]


def plot_runs(traces: dict[str, Trace], title: str | None = None) -> Figure:
    """One bar per run: live and masked slots at the end of the run (e.g. one long request, then short ones)."""
    rows = run_slots(traces)
    labels = [r["run"] for r in rows]
    fig, ax = subplots(figsize=(max(5, 1.2 * len(rows) + 2) + 1.5, 4))
    live = [r["slots_live"] for r in rows]
    ax.bar(labels, live, color=LIVE, label=_("live"))
    ax.bar(labels, [r["slots_masked"] for r in rows], bottom=live, color=MASKED, label=_("masked"))
    for i, r in enumerate(rows):
        masked_pct = _("{percent}% masked").format(percent=number(r["waste_pct"], 1))  # as the prose: 89.5%
        ax.annotate(masked_pct, (i, r["slots_allocated"]), ha="center", va="bottom", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    return finish_beside(fig, ax, title or _("Live vs masked slots per run"), ylabel=_("slots, summed over layers"))
