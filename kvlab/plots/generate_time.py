"""Time per new token of `generate` runs, with and without a cache, against the number of new tokens."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.plots._figure import finish, subplots
from kvlab.plots.palette import series


def plot_generate_time(
    seconds: dict[str, dict[int, float]],
    current: int | None = None,
    max_tokens: int | None = None,
    title: str | None = None,
) -> Figure:
    """`seconds[label][new_tokens]` = wall seconds of one `generate` call. Left: ms per new token; right: total
    seconds. `current` is circled; `max_tokens` fixes the x axis, so the picture keeps its scale as points come."""
    fig, (ax, ax_total) = subplots(1, 2, figsize=(10, 3.6))
    for index, (label, runs) in enumerate(seconds.items()):
        tokens = sorted(runs)
        (line,) = ax.plot(tokens, [runs[n] / n * 1e3 for n in tokens], "o-", color=series(index), label=label)
        ax_total.plot(tokens, [runs[n] for n in tokens], "o-", color=line.get_color(), label=label)
        if current in runs:
            circled = [runs[current] / current * 1e3]
            ax.plot([current], circled, "o", markersize=12, fillstyle="none", color=line.get_color())
    if max_tokens:
        for a in (ax, ax_total):
            a.set_xlim(0, max_tokens * 1.05)
    tokens_label = _("new tokens (max_new_tokens)")
    panels = [
        (ax, tokens_label, _("ms per new token"), _("time per new token")),
        (ax_total, tokens_label, _("seconds per generate call"), _("total time")),
    ]
    return finish(fig, panels, title)
