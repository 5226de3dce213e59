"""The quality–memory frontier: cache bytes against quality loss, one point per measured configuration,
with published results drawn apart as external references (vertical markers at their stated memory ratio)."""

from __future__ import annotations

from kvlab.i18n import _, number
from kvlab.measure.published import PUBLISHED
from kvlab.plots._figure import subplots, tight_layout_fitted
from kvlab.plots.palette import series

MEASURED, EXTERNAL = series(0), series(1)  # blue: measured by kvlab; orange: published references


def frontier_points(rows: list[dict]) -> list[dict]:
    """(label, memory ratio vs dynamic, perplexity change %) of every measured row holding a cache."""
    return [
        {"label": r["label"], "memory_ratio": r["ratio_vs_dynamic"], "quality": r["perplexity_delta_pct"]}
        for r in rows
        if r.get("status") == "measured" and r.get("ratio_vs_dynamic") and r.get("perplexity_delta_pct") is not None
    ]


def _grouped(points: list[dict]) -> list[dict]:
    """Points that coincide on the plot (e.g. dynamic, offloaded) share one marker and one joined label."""
    groups: dict[tuple, dict] = {}
    for p in points:
        key = (round(p["memory_ratio"], 1), round(p["quality"], 0))
        if key in groups:
            groups[key]["label"] += ", " + p["label"]
        else:
            groups[key] = dict(p)
    return list(groups.values())


def frontier(rows: list[dict], title: str = "", published: list[dict] | None = PUBLISHED):
    """A Figure: x = peak cache bytes ÷ dynamic's, y = perplexity change vs dynamic (%, symlog)."""
    points = _grouped(frontier_points(rows))
    fig, ax = subplots(figsize=(9, 5.5))
    for p in points:
        xy = (p["memory_ratio"], p["quality"])
        ax.scatter(*xy, s=40, color=MEASURED, zorder=3)
        ax.annotate(p["label"], xy, textcoords="offset points", xytext=(6, 3), fontsize=7.5)
    lines, style = [], {"fontsize": 7, "color": EXTERNAL}
    for ref in published or []:
        x = ref["memory_ratio"]
        ax.axvline(x, color=EXTERNAL, linestyle="--", linewidth=1, zorder=1)
        external = " " + _("external: {label}").format(label=_(ref["label"]))
        ax.text(x, 0.02, external, rotation=90, transform=ax.get_xaxis_transform(), va="bottom", ha="right", **style)
        ratio = number(x, 2, grouping=False)
        lines.append(f"{_(ref['label'])} (x = {ratio}): {_(ref['claim'])}")
    if lines:
        heading = _("External references (orange dashed, published, not measured by kvlab):")
        box = {"facecolor": "white", "edgecolor": EXTERNAL, "alpha": 0.9}
        ax.text(0.45, 0.97, heading + "\n" + "\n".join(lines), transform=ax.transAxes, va="top", bbox=box, **style)
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_yscale("symlog", linthresh=1.0)
    if points and min(p["quality"] for p in points) >= 0:
        ax.set_ylim(bottom=-0.3, top=max(3 * max(p["quality"] for p in points), 10))
    ax.set_xlabel(_("peak cache bytes ÷ dynamic cache (kvlab measured)"))
    ax.set_ylabel(_("perplexity change vs dynamic (%, symlog)"))
    ax.set_xlim(0, max([1.5] + [p["memory_ratio"] * 1.5 for p in points]))
    ax.set_title(
        title
        or _(
            "quality–memory frontier\nblue: measured by kvlab here; orange dashed: published, "
            "external references (not kvlab measurements)"
        ),
        fontsize=10,
    )
    return tight_layout_fitted(fig, grow=True)
