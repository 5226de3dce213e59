"""Time of each decode step beside the quantize work the trace counted at it (`kvlab.measure.step_times`)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.measure.step_times import flush_steps
from kvlab.plots._figure import dodged, legend_beside, subplots, tight_layout_fitted
from kvlab.plots.palette import series
from kvlab.plots.verdicts import add_verdicts


def plot_step_times(
    times: dict,
    traces: dict | None = None,
    field: str = "quantize_calls",
    title: str | None = None,
    verdicts: Sequence[str] = (),
) -> Figure:
    """Left: median ms of each decode step per configuration (`StepTimes`), its IQR a band, its flush steps (from
    its trace) circled and every flush step a dotted line. Right: `field` of each trace's `work_by_step()` at the
    same steps (exact), a bar per configuration that did any, in its colour; one legend for both panels.
    `verdicts`, the timing verdicts printed beside the figure, go in a box under it."""
    traces = traces or {}
    fig, (ax, ax_work) = subplots(1, 2, figsize=(12.5, 3.8), sharex=True)
    colors = {}
    for index, (label, result) in enumerate(times.items()):
        steps = result.step_numbers
        rows = result.per_step()
        medians = [m * 1e3 for m, _q1, _q3 in rows]
        (line,) = ax.plot(steps, medians, ".-", color=series(index), label=label)
        colors[label] = line.get_color()
        low, high = [q1 * 1e3 for _m, q1, _q3 in rows], [q3 * 1e3 for _m, _q1, q3 in rows]
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        flushed = [s for s in flush_steps(traces[label]) if s in steps] if label in traces else []
        if flushed:
            at = [medians[steps.index(s)] for s in flushed]
            ax.plot(flushed, at, "o", markersize=9, fillstyle="none", color=line.get_color())
    all_steps = sorted({s for result in times.values() for s in result.step_numbers})
    flushed_anywhere = sorted({s for trace in traces.values() for s in flush_steps(trace) if s in all_steps})
    drawn = [label for label in traces if any(_work(traces[label], field).get(s) for s in all_steps)]
    for i, label in enumerate(drawn):
        work = _work(traces[label], field)
        xs, width = dodged(len(drawn), i, all_steps)
        heights, color = [work.get(s) or 0 for s in all_steps], colors.get(label, series(len(times) + i))
        ax_work.bar(xs, heights, width=width, color=color, label=None if label in colors else label)
    for a in (ax, ax_work):
        for k, s in enumerate(flushed_anywhere):
            a.axvline(s, color="#555555", linestyle=":", linewidth=1, label=_("flushes") if k == 0 else None)
        a.set_xlabel(_("step (0 = prefill)"))
        if len(all_steps) <= 30:
            a.set_xticks(all_steps)
            a.tick_params(axis="x", labelsize=7)
        a.set_ylim(bottom=0)
        a.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    more = [(h, lab) for h, lab in zip(*ax_work.get_legend_handles_labels()) if lab not in labels]
    legend_beside(ax_work, handles + [h for h, _lab in more], labels + [lab for _h, lab in more], fontsize=8)
    ax.set_ylabel(_("ms per decode step (median, IQR)"))
    ax.set_title(_("time of one decode step"))
    names = {
        "quantize_calls": _("quantize calls (all layers)"),
        "quantized_elements": _("numbers quantized (all layers)"),
    }
    ax_work.set_ylabel(names.get(field, field))
    ax_work.set_title(_("quantize work of that step (exact)"))
    tight_layout_fitted(fig, grow=True, title=title)  # a Portuguese label too long for its panel wraps
    return add_verdicts(fig, verdicts)


def _work(trace, field: str) -> dict[int, int]:
    return {row["step"]: row[field] for row in trace.work_by_step()}
