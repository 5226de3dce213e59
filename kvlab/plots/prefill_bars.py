"""Tokens prefilled and time to the first new token, one group of bars per request: what reuse saved, for chat
turns and prefix-cached questions alike."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.plots._figure import dodged, grouped_bars, legend_beside, subplots
from kvlab.plots.palette import series as series_color
from kvlab.plots.verdicts import add_verdicts


def plot_prefill_bars(
    series: dict[str, list[tuple[int, float]]],
    request_name: str,
    time_label: str,
    title: str,
    verdicts: Sequence[str] = (),
) -> Figure:
    """`series` maps a label to one (tokens prefilled, seconds) pair per request; seconds may be a `Timing`
    (`milliseconds`). Each token bar carries its count: a prefill of 19 beside one of 170 is read, not guessed.
    `verdicts`, the timing verdicts printed beside the figure, one per request, go in a box under it, each after
    its request's name ("turn 2: reused is 3.90x faster than fresh (3.10-4.20)")."""
    fig, (tokens_ax, time_ax) = subplots(1, 2, figsize=(11, 3.6))
    grouped_bars(tokens_ax, {label: [tokens for tokens, _seconds in requests] for label, requests in series.items()})
    for i, (label, requests) in enumerate(series.items()):
        x, width = dodged(len(series), i, range(len(requests)))
        medians, errors = milliseconds([seconds for _tokens, seconds in requests])
        capsize = 3 if errors is not None else 0
        time_ax.bar(x, medians, width, label=label, color=series_color(i), yerr=errors, capsize=capsize)
    count = max((len(requests) for requests in series.values()), default=0)
    for ax, ylabel in ((tokens_ax, _("tokens prefilled")), (time_ax, time_label)):
        ax.set_xticks(range(count), [f"{request_name} {i + 1}" for i in range(count)])
        ax.set_ylabel(ylabel)
        ax.margins(y=0.1)
    legend_beside(time_ax, fontsize="small", frameon=False, anchor=1.02)
    fig.suptitle(title)
    fig.tight_layout()
    return add_verdicts(fig, {f"{request_name} {i + 1}": verdict for i, verdict in enumerate(verdicts)})


def milliseconds(values: list) -> tuple[list[float], list[list[float]] | None]:
    """Bar heights in ms, and when the values are `kvlab.measure.timing.Timing`s the medians with (below, above)
    error bars spanning the interquartile range, so that bars whose ranges overlap show no difference."""
    if not values or not all(hasattr(v, "quartiles") for v in values):
        return [v * 1e3 for v in values], None
    medians = [v.median * 1e3 for v in values]
    below = [m - v.quartiles[0] * 1e3 for m, v in zip(medians, values)]
    above = [v.quartiles[1] * 1e3 - m for m, v in zip(medians, values)]
    return medians, [below, above]
