"""A long text read through bounded caches (`kvlab.measure.streaming`): the loss at each position, one line per
cache, and the budget where the first tokens start to leave; and the strategies beside the guide's kinds on the
quality–memory plane."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from kvlab.i18n import _, cache_kind_label, number
from kvlab.measure.streaming import BLOCK_TOKENS, rolling_mean
from kvlab.plots._figure import NumberFormatter, legend_beside, subplots, tight_layout_fitted
from kvlab.plots.palette import series


def loss_by_position(rows: list[dict], budget: int, width: int = BLOCK_TOKENS, title: str = "") -> Figure:
    """Per cache (`kvlab.measure.streaming.summary`'s rows: a label and every token's NLL), the mean NLL of the last
    `width` tokens at each position; a dashed line where the cache is full and the first tokens start to leave."""
    fig, ax = subplots(figsize=(9, 4))
    for index, row in enumerate(rows):
        position = range(2, len(row["nll"]) + 2)  # nll[i] is token i + 1's, counted from 1 as a reader does
        ax.plot(position, rolling_mean(row["nll"], width), color=series(index), linewidth=1.2, label=_(row["label"]))
    ax.axvline(budget + 1, color="black", linestyle="--", linewidth=1)
    full = " " + _("cache full ({budget} tokens)").format(budget=number(budget))
    ax.text(budget + 1, 0.98, full, transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    ax.set_xlabel(_("token of the text"))
    ax.set_ylabel(_("loss (−log probability, mean of the last {width} tokens)").format(width=number(width)))
    ax.set_title(title or _("loss along the text, per cache"), fontsize=10)
    ax.grid(alpha=0.3)
    legend_beside(ax, fontsize=8)
    return tight_layout_fitted(fig)


def guide_points(rows: list[dict]) -> list[dict]:
    """A bench's measured rows (`kvlab bench`: "cache", "label", "ratio_vs_dynamic", "perplexity_delta_pct") as
    points: memory and perplexity against the dynamic cache; the kinds that keep every byte of it (static,
    offloaded) sit on the dynamic cache's point and are left to it."""
    points = []
    for row in rows:
        ratio, delta = row.get("ratio_vs_dynamic"), row.get("perplexity_delta_pct")
        if row.get("status") != "measured" or not ratio or delta is None:
            continue
        if row["cache"] == "dynamic" or ratio < 0.99:
            detail = row["label"].removeprefix(row["cache"]).strip()  # "hqq int4" of "quantized hqq int4"
            label = f"{cache_kind_label(row['cache'])} {detail}".strip()
            points.append(_point(label, row))
    return points


def _point(label: str, row: dict) -> dict:
    """A measured row as a point: its cache bytes and its perplexity, each over the full cache's."""
    return {"label": label, "memory": row["ratio_vs_dynamic"], "perplexity": 1 + row["perplexity_delta_pct"] / 100}


def strategy_frontier(strategies: list[dict], guide: list[dict], title: str = "") -> Figure:
    """x: cache bytes over the full cache's; y: perplexity over the full cache's (log). `strategies` are
    `kvlab.measure.streaming.frontier_rows` (a long text), `guide` a bench's rows (its own short windows), drawn
    in two colours: each group is measured against its own full cache."""
    fig, ax = subplots(figsize=(9, 5))
    groups = (
        (guide_points(guide), series(0), _("the guide's kinds (short windows)")),
        ([_point(row["label"], row) for row in strategies], series(1), _("strategies (a long text, streamed)")),
    )
    for points, color, name in groups:
        ax.scatter([p["memory"] for p in points], [p["perplexity"] for p in points], color=color, s=40, label=name)
        near_one = sorted((p for p in points if p["perplexity"] < 1.3), key=lambda p: p["memory"])
        for p in points:  # the crowd near 1: every third label below its point, so neighbours' labels do not meet
            above = -12 if p in near_one and near_one.index(p) % 3 == 1 else 3
            xy = (p["memory"], p["perplexity"])
            ax.annotate(p["label"], xy, textcoords="offset points", xytext=(6, above), fontsize=7.5)
    ax.axhline(1, color="grey", linewidth=0.5)
    ax.set_yscale("log")
    highest = max([p["perplexity"] for points, _color, _name in groups for p in points] + [1.1])
    ax.set_yticks([t for t in (1, 1.25, 1.5, 2, 3, 5, 8, 13, 20, 50, 100) if t <= highest * 1.2])
    ax.yaxis.set_major_formatter(NumberFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(0, 1.45)
    ax.set_xlabel(_("cache bytes ÷ the full cache's"))
    ax.set_ylabel(_("perplexity ÷ the full cache's (log scale)"))
    ax.set_title(title or _("quality and memory: strategies beside the guide's kinds"), fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return tight_layout_fitted(fig)
