"""Prefix caching: the token-prefix check drawn, and tokens and bytes of each deep copy of a prefilled cache."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from kvlab.i18n import N_, _, number
from kvlab.measure.prefix import tokens_fed_after_copy
from kvlab.plots._figure import DATA_TEXT, grouped_bars, legend_beside, subplots, tight_layout_fitted
from kvlab.plots.palette import CACHED, CROPPED, FREE
from kvlab.plots.palette import series as series_color
from kvlab.units import binary_unit

# ids agree (reusable); differ (wrong keys and values: a crop back to the common prefix removes them); not cached
MATCH, DIFFERS, QUESTION = CACHED, CROPPED, FREE


def plot_token_prefix(check, around: int = 6, title: str | None = None) -> Figure:
    """From a `kvlab.measure.prefix.TokenPrefix`: the prefix tokenized alone (top) and with the question (bottom),
    as token boxes around the seam: a prefix of up to `around` + 2 tokens whole, a longer one's last `around`,
    then up to `around` positions of the question."""
    n_prefix, n_full = len(check.prefix_ids), len(check.full_ids)
    mismatch = check.mismatch
    start = 0 if n_prefix <= around + 2 else n_prefix - around
    stop = min(max(n_prefix, n_full), n_prefix + around)
    fig, ax = subplots(figsize=(min(1.1 * (stop - start) + 1.5, 14), 2.2))
    rows = [
        (_("prefix alone"), check.prefix_ids, check.prefix_tokens),
        (_("prefix + question"), check.full_ids, check.full_tokens),
    ]
    for y, (_label, ids, tokens) in zip((1, 0), rows):
        for position in range(start, min(stop, len(ids))):
            if position >= n_prefix:
                color = QUESTION
            else:
                color = DIFFERS if mismatch is not None and position >= mismatch else MATCH
            edge = "#969696" if color == QUESTION else "white"
            ax.add_patch(Rectangle((position - 0.45, y - 0.35), 0.9, 0.7, facecolor=color, edgecolor=edge))
            ink = "white" if color in (MATCH, DIFFERS) else "black"
            box = _show(tokens[position])
            ax.text(position, y, box, ha="center", va="center", fontsize=8, color=ink, gid=DATA_TEXT)  # the model's
    ax.axvline(n_prefix - 0.5, color="black", linestyle="--", linewidth=1)
    ax.set_xlim(start - 0.6, stop - 0.4)
    ax.set_xticks(range(start, stop))
    ax.set_ylim(-0.6, 1.6)
    ax.set_yticks([1, 0], [label for label, _ids, _tokens in rows])
    ax.set_xlabel(_("token position (dashed line: end of the cached prefix)"))
    verdict = (
        _("ids line up: the cache can be reused")
        if check.ok
        else _("ids differ at position {position}: reuse would feed the model the wrong ids").format(position=mismatch)
    )
    ax.set_title(title or verdict, fontsize=10)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return tight_layout_fitted(fig, grow=True)  # a few boxes make a narrow figure: its long x label and title wrap


def _show(token: str) -> str:
    """A byte-level BPE token as a reader sees it: `Ġ` is a space, `Ċ` a newline."""
    text = token.replace("Ġ", "␣").replace("Ċ", "↵")
    return text if len(text) <= 9 else text[:8] + "…"


def plot_prefix_copies(
    traces, prompt_tokens: list[int], title: str = N_("One prefilled prefix, a deep copy per question")
) -> Figure:
    """From `kvlab.watch(...).traces` of the guide's prefix recipe (a prefix cache, then a deep copy per question,
    per cache class) and each question's full prompt length: the tokens each answer prefilled (a copy vs no reuse),
    and the peak bytes of each copy. A cache class keeps its colour in both panels; each panel is titled and
    its legend names its own bars only (no "no reuse" beside the copies' bytes)."""
    copies: dict[str, list] = {}
    for trace in traces:
        if trace.meta.get("copied_from") is not None:
            copies.setdefault(_("{name} copy").format(name=trace.meta.get("cache_class", "cache")), []).append(trace)
    fig, (tokens_ax, bytes_ax) = subplots(1, 2, figsize=(11, 3.6))
    fed = {name: [tokens_fed_after_copy(t) for t in group] for name, group in copies.items()}
    grouped_bars(tokens_ax, {_("no reuse"): list(prompt_tokens), **fed})
    unit, scale = binary_unit(max((t.summary()["peak_bytes"] for g in copies.values() for t in g), default=0))
    peaks = {name: [t.summary()["peak_bytes"] / scale for t in group] for name, group in copies.items()}
    grouped_bars(bytes_ax, peaks, shown=lambda peak: number(peak, 2), colour=lambda i: series_color(i + 1))
    questions = [_("question {number}").format(number=i + 1) for i in range(len(prompt_tokens))]
    for ax, ylabel, heading in (
        (tokens_ax, _("tokens prefilled for the answer"), _("Prefill: no reuse vs a copy of the prefix")),
        (bytes_ax, _("bytes held by the copy ({unit})").format(unit=unit), _("Memory: each copy's peak bytes")),
    ):
        ax.set_xticks(range(len(prompt_tokens)), questions)
        ax.set_ylabel(ylabel)
        ax.set_title(heading, fontsize=10)
        ax.margins(y=0.12)
        if ax.get_legend_handles_labels()[0]:  # its own bars only; a class keeps its colour in both
            legend_beside(ax, fontsize="small", frameon=False)
    return tight_layout_fitted(fig, title=_(title))
