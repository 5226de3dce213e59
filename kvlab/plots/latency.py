"""Time per new token against position: the picture of why a KV cache exists (see `kvlab.measure.latency`)."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _
from kvlab.measure.latency import TokenTimes
from kvlab.plots._figure import finish, subplots


def plot_token_times(runs: dict[str, TokenTimes], title: str | None = None) -> Figure:
    """Seconds per token against position (left) and cumulative seconds against tokens generated (right)."""
    fig, (ax, ax_total) = subplots(1, 2, figsize=(10, 3.8))
    for label, run in runs.items():
        ax.plot(run.positions[1:], [s * 1e3 for s in run.seconds[1:]], ".-", label=label)
        cumulative = [sum(run.seconds[: i + 1]) for i in range(len(run.seconds))]
        ax_total.plot(range(1, len(cumulative) + 1), cumulative, label=label)
    ax.set_xlabel(_("position (tokens in context)"))
    ax.set_ylabel(_("ms per new token"))
    ax.set_ylim(bottom=0)
    ax.set_title(_("time per new token (after the prefill)"))
    ax_total.set_xlabel(_("tokens generated"))
    ax_total.set_ylabel(_("cumulative seconds"))
    ax_total.set_title(_("total time"))
    return finish(fig, (ax, ax_total), title)
