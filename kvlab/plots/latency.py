"""Time per new token against position: the picture of why a KV cache exists (see `kvlab.measure.latency`)."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.measure.latency import TokenTimes
from kvlab.plots._figure import finish, subplots
from kvlab.plots.palette import series
from kvlab.plots.verdicts import add_verdicts


def plot_token_times(runs: dict[str, TokenTimes], title: str | None = None, verdicts=()) -> Figure:
    """Milliseconds per token against position, with the interquartile band over repeats (left), and the
    tokens each forward ran through the model, counted exactly (right): the work behind the time. `verdicts`, the
    timing verdicts printed beside the figure (a list, or {what was compared: verdict}), go in a box under it."""
    fig, (ax, ax_work) = subplots(1, 2, figsize=(10, 3.8))
    for index, (label, run) in enumerate(runs.items()):
        line = ax.plot(run.positions[1:], [s * 1e3 for s in run.seconds[1:]], ".-", color=series(index), label=label)[0]
        if run.repeats > 1 and len(run.q1) == len(run.seconds):
            low, high = [s * 1e3 for s in run.q1[1:]], [s * 1e3 for s in run.q3[1:]]
            ax.fill_between(run.positions[1:], low, high, color=line.get_color(), alpha=0.25, linewidth=0)
        if run.tokens_run:
            ax_work.plot(run.positions[1:], run.tokens_run[1:], ".-", color=line.get_color(), label=label)
    position = _("position (tokens in context)")
    panels = [
        (ax, position, _("ms per new token"), _("time per new token (after the prefill)")),
        (ax_work, position, _("tokens run by the forward"), _("work per new token (exact)")),
    ]
    return add_verdicts(finish(fig, panels, title), verdicts)
