"""One decode step's time against the cache it reads, beside the attention work it did (`kvlab.measure.decode_step`)."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, number
from kvlab.plots._figure import subplots, tight_layout_fitted
from kvlab.plots.palette import series
from kvlab.plots.prefill_bars import milliseconds


def plot_decode_steps(steps: dict, title: str | None = None) -> Figure:
    """Left: median ms of the step per cache, with its interquartile range as an error bar. Right: key slots
    the step's query was scored against, over all layers (exact: the work the masked slots add). Each bar is
    labelled with its value, in the reader's number format: next to 122,880 slots a DynamicCache's 210 is not a
    visible bar."""
    fig, (ax, ax_work) = subplots(1, 2, figsize=(10, 3.6))
    labels = list(steps)
    x = range(len(labels))
    medians, errors = milliseconds([steps[k].timing for k in labels])
    time_bars = ax.bar(x, medians, color=series(0), yerr=errors, capsize=4)
    ax.bar_label(time_bars, labels=[number(m, 1) for m in medians], fontsize=7, padding=6)
    ax.set_ylabel(_("ms per decode step (median, IQR)"))
    ax.set_title(_("time of one decode step"))
    work = [steps[k].slots_attended or 0 for k in labels]
    work_bars = ax_work.bar(x, work, color=series(1))
    ax_work.bar_label(work_bars, labels=[number(w) for w in work], fontsize=7)
    ax_work.set_ylabel(_("key slots attended (all layers)"))
    ax_work.set_title(_("attention work of that step (exact)"))
    for a in (ax, ax_work):
        a.set_xticks(list(x), labels, rotation=15, fontsize=8)
        a.set_ylim(0, a.get_ylim()[1] * 1.1)  # room for the labels above the tallest bar
        a.grid(alpha=0.3, axis="y")
    return tight_layout_fitted(fig, grow=True, title=title)
