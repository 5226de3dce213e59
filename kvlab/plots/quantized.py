"""Quantized caches: packed low-bit bytes beside the full-precision residual (the newest `residual_length`
tokens, which dominate at short lengths), and quality against memory across backends and bit widths."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, number
from kvlab.measure.published import PUBLISHED
from kvlab.plots._figure import finish_beside, subplots, tight_layout_fitted
from kvlab.plots.growth import snapshots, tokens_seen, total_bytes
from kvlab.plots.palette import series
from kvlab.recording.trace import Trace
from kvlab.units import binary_unit

PACKED, RESIDUAL = series(0), series(1)


def split_by_step(trace: Trace) -> list[dict]:
    """Per step: tokens seen, packed bytes, residual bytes, quantized and residual tokens (summed over layers)."""
    fields = ("packed_bytes", "residual_bytes", "quantized_tokens", "residual_tokens")
    return [
        {
            "step": step,
            "tokens": tokens_seen(layers, trace, step),
            **{f: sum(e[f] for e in layers.values()) for f in fields},
        }
        for step, layers in snapshots(trace)
    ]


def plot_split(
    trace: Trace, title: str | None = None, reference_trace: Trace | None = None, reference_label: str = "DynamicCache"
) -> Figure:
    """Stacked packed vs residual bytes against tokens for one quantized run; flushes show as drops.
    `reference_trace` (e.g. a DynamicCache on the same tokens) adds its total bytes as a dashed line."""
    rows = split_by_step(trace)
    tokens = [r["tokens"] for r in rows]
    reference = total_bytes(reference_trace) if reference_trace is not None else []
    stacked = [r["packed_bytes"] + r["residual_bytes"] for r in rows]
    unit, scale = binary_unit(max([*stacked, *(b for _t, b in reference)], default=0))
    fig, ax = subplots(figsize=(9, 4))
    packed = [r["packed_bytes"] / scale for r in rows]
    residual = [r["residual_bytes"] / scale for r in rows]
    names = [_("packed (quantized)"), _("residual (full precision)")]
    ax.stackplot(tokens, packed, residual, labels=names, colors=[PACKED, RESIDUAL], alpha=0.7)
    if reference:
        xs, ys = zip(*reference)
        ax.plot(xs, [y / scale for y in ys], color="k", ls="--", lw=1, label=reference_label)
    ax.grid(alpha=0.3)
    ylabel = _("cache bytes ({unit})").format(unit=unit)
    return finish_beside(fig, ax, title or _("Packed vs residual bytes"), _("tokens seen"), ylabel)


def plot_configs(traces: dict[str, Trace], reference_bytes: int | None = None, title: str | None = None) -> Figure:
    """One bar per configuration: final packed and residual bytes stacked; a line at `reference_bytes`. The
    configurations' names are slanted, anchored at their right end under their bar, so none runs off the figure."""
    labels = list(traces)
    finals = [split_by_step(t)[-1] for t in traces.values()]
    stacked = [r["packed_bytes"] + r["residual_bytes"] for r in finals]
    unit, scale = binary_unit(max([*stacked, reference_bytes or 0], default=0))
    fig, ax = subplots(figsize=(max(6, 0.8 * len(labels) + 2) + 2, 4))
    packed = [r["packed_bytes"] / scale for r in finals]
    ax.bar(labels, packed, color=PACKED, alpha=0.7, label=_("packed"))
    residual = [r["residual_bytes"] / scale for r in finals]
    ax.bar(labels, residual, bottom=packed, color=RESIDUAL, alpha=0.7, label=_("residual (full precision)"))
    if reference_bytes:
        ax.axhline(reference_bytes / scale, color="k", ls="--", lw=1, label="DynamicCache")
    ax.tick_params(axis="x", labelsize=8)
    for label in ax.get_xticklabels():  # slanted from their bar's centre, the figure laid out around them
        label.set(rotation=30, ha="right", rotation_mode="anchor")
    ylabel = _("cache bytes ({unit})").format(unit=unit)
    return finish_beside(fig, ax, title or _("Packed vs residual bytes per configuration"), ylabel=ylabel)


def plot_quality_vs_memory(rows: list[dict], title: str | None = None) -> Figure:
    """`kvlab.measure.quality.sweep` rows, two panels on one memory axis. Top: each configuration's quality at the
    memory ratio of the same run (the whole cache, residual included, vs 16 bits), on a quality axis from 0. Below,
    a strip with no quality axis: the packed part's ratio (what a much longer sequence approaches), a hollow marker
    per configuration, since no quality was measured there. Coinciding points share a label."""
    fig, (ax, strip) = subplots(2, 1, figsize=(9, 6.2), sharex=True, gridspec_kw={"height_ratios": [5, 1]})
    points: dict[tuple[float, float], list[str]] = {}
    packed_at: dict[float, list[str]] = {}
    for index, r in enumerate(rows):
        color = series(index)
        whole, packed, y = r["memory_ratio_16bit"], r["packed_ratio_16bit"], r["top1_agreement"]
        ax.scatter(whole, y, s=45, color=color, zorder=3)
        strip.scatter(packed, 0.5, s=45, marker="^", facecolors="none", edgecolors=color, zorder=3)
        points.setdefault((whole, y), []).append(r["config"])
        packed_at.setdefault(packed, []).append(r["config"])
    for point, names in points.items():
        ax.annotate(", ".join(names), point, fontsize=7, xytext=(4, 3), textcoords="offset points")
    for x, names in packed_at.items():  # one label per marker, stacked above it when configurations coincide
        strip.annotate(
            "\n".join(names),
            (x, 0.5),
            fontsize=6.5,
            xytext=(5, 0),
            textcoords="offset points",
            va="center",
            linespacing=1.0,
        )
    ax.set_ylim(0, 1.08 if rows and max(r["top1_agreement"] for r in rows) <= 1 else None)  # quality read from 0
    ax.set_ylabel(_("top-1 agreement with DynamicCache (1.0 = same)"))
    ax.set_title(_("whole cache at the measured length (residual included): quality measured"), fontsize=9)
    strip.set_ylim(0, 1)
    strip.set_yticks([])
    strip.set_title(_("packed part alone: its memory ratio only, no quality measured there"), fontsize=9)
    strip.set_xlabel(_("KV bytes relative to a 16-bit cache of the same tokens"))
    if rows:  # room right of the last point and marker for their labels
        xs = [r[key] for r in rows for key in ("memory_ratio_16bit", "packed_ratio_16bit")]
        width = max(max(xs) - min(xs), 0.05)
        ax.set_xlim(min(xs) - 0.05 * width, max(xs) + 0.18 * width)
    for a in (ax, strip):
        a.grid(alpha=0.3)
    return tight_layout_fitted(
        fig, grow=True, title=title or _("Measured here: quality against the memory of the same run")
    )


def references_markdown(references=PUBLISHED) -> str:
    """The published results as a Markdown table of their own, marked external: measured otherwise, they share
    no axis with kvlab's measurements."""
    head = _("| | external result (not measured by kvlab) | its memory figure | source |")
    lines = [head, "|---|---|---|---|"]
    for index, r in enumerate(references, start=1):
        ratio = number(r["memory_ratio"], 2, grouping=False)
        meaning = _(r["memory_meaning"]) if "memory_meaning" in r else _("{ratio} of 16-bit").format(ratio=ratio)
        lines.append(f"| R{index} | {_(r['reference'])} | {meaning} | {r['url']} |")
    return "\n".join(lines)
