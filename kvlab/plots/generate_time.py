"""The guide's two `generate` calls, with and without a cache, against the prompt's length: the time of each new
token after the first (the decode steps), and the time to the first (the prefill, the same work in both)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.measure.timing import Timing
from kvlab.plots._figure import finish, subplots
from kvlab.plots.palette import series
from kvlab.plots.prefill_bars import milliseconds
from kvlab.plots.verdicts import add_verdicts


def plot_generate_time(
    steps: dict[str, dict[int, Timing]],
    first_token: dict[str, dict[int, float]],
    current: int | None = None,
    max_tokens: int | None = None,
    title: str | None = None,
    verdicts: Sequence[str] = (),
) -> Figure:
    """`steps[label][prompt_tokens]`: the times of one call's decode steps (seconds each); `first_token[label]
    [prompt_tokens]`: its seconds to the first new token. Left: ms per new token, the median with the interquartile
    range of the steps as error bars; right: ms to the first new token. `current` is circled; `max_tokens` fixes the
    x axis, so the picture keeps its scale as points come; `verdicts` go in a box under the panels."""
    fig, (ax, ax_first) = subplots(1, 2, figsize=(10, 3.6))
    for index, (label, by_prompt) in enumerate(steps.items()):
        tokens = sorted(by_prompt)
        medians, errors = milliseconds([by_prompt[n] for n in tokens])
        color = series(index)
        ax.errorbar(tokens, medians, yerr=errors, fmt="o-", capsize=3, color=color, label=label)
        firsts = first_token.get(label, {})
        ax_first.plot(sorted(firsts), [firsts[n] * 1e3 for n in sorted(firsts)], "o-", color=color, label=label)
        if current in by_prompt:
            ax.plot([current], [medians[tokens.index(current)]], "o", markersize=12, fillstyle="none", color=color)
    if max_tokens:
        for a in (ax, ax_first):
            a.set_xlim(0, max_tokens * 1.05)
    tokens_label = _("prompt tokens")
    panels = [
        (ax, tokens_label, _("ms per new token"), _("each new token after the first")),
        (ax_first, tokens_label, _("ms to the first new token"), _("the prefill (to the first new token)")),
    ]
    return add_verdicts(finish(fig, panels, title), verdicts)
