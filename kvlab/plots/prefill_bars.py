"""Two panels of grouped bars, one group per request: tokens prefilled, and the time to the first new token.

Chat turns (`turns.py`) and prefix-cached questions (`prefix.py`) ask the same question of reuse: how much of
the prompt had to go through the model again, and what that cost before the first token appeared.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.plots._figure import legend_beside, subplots
from kvlab.plots.palette import series as series_color


def plot_prefill_bars(
    series: dict[str, list[tuple[int, float]]], request_name: str, time_label: str, title: str
) -> Figure:
    """`series` maps a label to one (tokens prefilled, seconds) pair per request. Seconds may be a number (one
    reading) or a `kvlab.measure.timing.Timing` (repeats): then the bar is the median and an error bar spans the
    interquartile range, so two bars whose ranges overlap read as what they are, no difference shown.

    Each token bar carries its count (a prefill of 19 beside one of 170 is read, not guessed), and the legend
    sits to the right of the time panel, outside both axes, where it can cover no bar."""
    fig, (tokens_ax, time_ax) = subplots(1, 2, figsize=(11, 3.6))
    width = 0.8 / max(len(series), 1)
    for i, (label, requests) in enumerate(series.items()):
        x = np.arange(len(requests)) + (i - (len(series) - 1) / 2) * width
        bars = tokens_ax.bar(x, [tokens for tokens, _seconds in requests], width, label=label, color=series_color(i))
        tokens_ax.bar_label(bars, fontsize=7)
        medians, errors = _milliseconds([seconds for _tokens, seconds in requests])
        time_ax.bar(
            x, medians, width, label=label, color=series_color(i), yerr=errors, capsize=3 if errors is not None else 0
        )
    count = max((len(requests) for requests in series.values()), default=0)
    for ax, ylabel in ((tokens_ax, _("tokens prefilled")), (time_ax, time_label)):
        ax.set_xticks(range(count), [f"{request_name} {i + 1}" for i in range(count)])
        ax.set_ylabel(ylabel)
        ax.margins(y=0.1)
    legend_beside(time_ax, fontsize="small", frameon=False, anchor=1.02)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _milliseconds(values: list) -> tuple[list[float], list[list[float]] | None]:
    """Bar heights in ms, and (below, above) error bars when the values are repeated timings."""
    if not values or not all(hasattr(v, "quartiles") for v in values):
        return [v * 1e3 for v in values], None
    medians = [v.median * 1e3 for v in values]
    below = [m - v.quartiles[0] * 1e3 for m, v in zip(medians, values)]
    above = [v.quartiles[1] * 1e3 - m for m, v in zip(medians, values)]
    return medians, [below, above]
