"""One decode step's time against the cache it reads, beside the attention work it did (`kvlab.measure.decode_step`)."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.plots._figure import subplots


def plot_decode_steps(steps: dict, title: str | None = None) -> Figure:
    """Left: median ms of the step per cache, with its interquartile range as an error bar. Right: key slots
    the step's query was scored against, over all layers (exact: the work the masked slots add)."""
    fig, (ax, ax_work) = subplots(1, 2, figsize=(10, 3.6))
    labels = list(steps)
    x = range(len(labels))
    medians = [steps[k].timing.median * 1e3 for k in labels]
    q1 = [steps[k].timing.quartiles[0] * 1e3 for k in labels]
    q3 = [steps[k].timing.quartiles[1] * 1e3 for k in labels]
    errors = [[m - lo for m, lo in zip(medians, q1)], [hi - m for m, hi in zip(medians, q3)]]
    ax.bar(x, medians, color="#3182bd", yerr=errors, capsize=4)
    ax.set_ylabel(_("ms per decode step (median, IQR)"))
    ax.set_title(_("time of one decode step"))
    ax_work.bar(x, [steps[k].slots_attended or 0 for k in labels], color="#e6550d")
    ax_work.set_ylabel(_("key slots attended (all layers)"))
    ax_work.set_title(_("attention work of that step (exact)"))
    for a in (ax, ax_work):
        a.set_xticks(list(x), labels, rotation=15, fontsize=8)
        a.set_ylim(bottom=0)
        a.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
