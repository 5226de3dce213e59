"""Multi-turn chat: tokens prefilled per turn (a reused cache only what is new, a fresh one the whole growing
conversation), and where a cache's ids and a new prompt's diverge."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvlab.i18n import N_, _
from kvlab.plots._figure import grouped_bars, legend_beside, subplots
from kvlab.plots.palette import CACHED, CROPPED, FREE


def plot_id_alignment(cached_ids, prompt_ids, title: str = N_("Cached ids vs the new prompt")) -> Figure:
    """One strip per position: the cached id equals the prompt's (reusable), differs (stale: a crop back to the
    common prefix removes it), or is new (to prefill)."""
    cached, prompt = list(cached_ids), list(prompt_ids)

    def colour(position: int) -> str:
        if position >= len(cached):
            return FREE
        return CROPPED if position >= len(prompt) or cached[position] != prompt[position] else CACHED

    colours = [colour(position) for position in range(max(len(cached), len(prompt)))]
    fig, ax = subplots(figsize=(10, 2.0))
    ax.bar(range(len(colours)), [1] * len(colours), width=1.0, color=colours, edgecolor="#bdbdbd", linewidth=0.3)
    ax.set_yticks([])
    ax.set_xlim(-0.5, len(colours) - 0.5)
    ax.set_xlabel(_("token position"))
    ax.set_title(_(title))
    handles = [
        Patch(facecolor=CACHED, label=_("cached = prompt")),
        Patch(facecolor=CROPPED, label=_("cached ≠ prompt")),
        Patch(facecolor=FREE, edgecolor="#bdbdbd", label=_("not cached yet")),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.9), ncol=3, fontsize="small", frameon=False)
    fig.subplots_adjust(left=0.02, right=0.98, top=0.82, bottom=0.5)  # room for the legend below the axis
    return fig


def alignment_counts(cached_ids, prompt_ids) -> dict:
    """How many positions match, differ, or are new: the numbers behind `plot_id_alignment`."""
    cached, prompt = list(cached_ids), list(prompt_ids)
    unequal = sum(1 for a, b in zip(cached, prompt) if a != b)
    return {
        "match": min(len(cached), len(prompt)) - unequal,
        "differ": unequal + max(len(cached) - len(prompt), 0),
        "new": max(len(prompt) - len(cached), 0),
    }


def plot_turn_prefills(series: dict[str, list[int]], title: str = N_("Tokens prefilled per turn")) -> Figure:
    """One panel of grouped bars from `{label: tokens prefilled per turn}` (e.g. `kvlab.measure.chat.turn_prefills`),
    each bar labelled with its count; the legend sits right of the axes, where it covers no bar."""
    fig, ax = subplots(figsize=(8.5, 3.4))
    grouped_bars(ax, series)
    turns = max((len(counts) for counts in series.values()), default=0)
    ax.set_xticks(range(turns), [_("turn {number}").format(number=i + 1) for i in range(turns)])
    ax.set_ylabel(_("tokens prefilled"))
    ax.margins(y=0.12)
    legend_beside(ax, fontsize="small", frameon=False)
    ax.set_title(_(title))
    fig.tight_layout()
    return fig
