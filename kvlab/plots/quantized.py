"""Quantized caches: packed low-bit bytes beside the full-precision residual (the newest `residual_length`
tokens, which dominate at short lengths), and quality against memory across backends and bit widths."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import N_, _, number
from kvlab.plots._figure import legend_beside, subplots, tight_layout_fitted
from kvlab.plots._snapshots import snapshots, tokens_seen
from kvlab.plots.growth import total_bytes
from kvlab.plots.palette import series
from kvlab.recording.trace import Trace

PACKED, RESIDUAL = series(0), series(1)

# Published results (other models, benchmarks, hardware), not measured by kvlab; memory relative to a 16-bit cache.
PUBLISHED_REFERENCES = (
    {
        "label": N_("HF blog: quanto int4 ≈ fp16 on LongBench"),
        "memory_ratio": 4 / 16,
        "memory_meaning": N_("nominal: 4 of 16 bits per number"),
        "source": "https://huggingface.co/blog/kv-cache-quantization",
    },
    {
        "label": N_("HF blog: quanto int2 degrades on LongBench"),
        "memory_ratio": 2 / 16,
        "memory_meaning": N_("nominal: 2 of 16 bits per number"),
        "source": "https://huggingface.co/blog/kv-cache-quantization",
    },
    {
        "label": N_("KIVI 2-bit: ≈ same quality, 2.6× less peak memory (incl. weights)"),
        "memory_ratio": 1 / 2.6,
        "memory_meaning": N_("peak memory of the whole run, model weights included (1 / 2.6)"),
        "source": "https://arxiv.org/abs/2402.02750",
    },
)


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
    fig, ax = subplots(figsize=(9, 4))
    packed = [r["packed_bytes"] / 1e6 for r in rows]
    residual = [r["residual_bytes"] / 1e6 for r in rows]
    names = [_("packed (quantized)"), _("residual (full precision)")]
    ax.stackplot(tokens, packed, residual, labels=names, colors=[PACKED, RESIDUAL], alpha=0.7)
    if reference_trace is not None:
        xs, ys = zip(*total_bytes(reference_trace))
        ax.plot(xs, [y / 1e6 for y in ys], color="k", ls="--", lw=1, label=reference_label)
    ax.set_xlabel(_("tokens seen"))
    ax.set_ylabel(_("cache bytes (MB)"))
    ax.grid(alpha=0.3)
    legend_beside(ax, fontsize=8)  # outside: the saw fills the axes
    ax.set_title(title or _("Packed vs residual bytes"))
    tight_layout_fitted(fig, grow=True)
    return fig


def plot_configs(traces: dict[str, Trace], reference_bytes: int | None = None, title: str | None = None) -> Figure:
    """One bar per configuration: final packed and residual bytes stacked; a line at `reference_bytes`."""
    labels = list(traces)
    finals = [split_by_step(t)[-1] for t in traces.values()]
    fig, ax = subplots(figsize=(max(6, 0.8 * len(labels) + 2) + 2, 4))
    packed = [r["packed_bytes"] / 1e6 for r in finals]
    ax.bar(labels, packed, color=PACKED, alpha=0.7, label=_("packed"))
    residual = [r["residual_bytes"] / 1e6 for r in finals]
    ax.bar(labels, residual, bottom=packed, color=RESIDUAL, alpha=0.7, label=_("residual (full precision)"))
    if reference_bytes:
        ax.axhline(reference_bytes / 1e6, color="k", ls="--", lw=1, label="DynamicCache")
    ax.set_ylabel(_("cache bytes (MB)"))
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    legend_beside(ax, fontsize=8)
    ax.set_title(title or _("Packed vs residual bytes per configuration"))
    tight_layout_fitted(fig, grow=True)
    return fig


def plot_quality_vs_memory(
    rows: list[dict],
    quality_key: str = "top1_agreement",
    quality_label: str = N_("top-1 agreement with DynamicCache (1.0 = same)"),
    title: str | None = None,
) -> Figure:
    """`kvlab.measure.quality.sweep` rows: each configuration's quality at the memory ratio of the same run (the
    whole cache, residual included, vs 16 bits). The packed part's ratio (what a much longer sequence approaches)
    is a hollow tick on the x axis at no height: no quality was measured there. Coinciding points share a label."""
    fig, ax = subplots(figsize=(9, 5.5))
    labels: dict[tuple[float, float], list[str]] = {}
    rug = ax.get_xaxis_transform()  # x in data, y in axes fraction: a tick along the bottom edge
    for index, r in enumerate(rows):
        color = series(index)
        whole, packed, y = r["memory_ratio_16bit"], r["packed_ratio_16bit"], r[quality_key]
        ax.scatter(whole, y, s=45, color=color, zorder=3)
        ax.scatter(packed, 0.03, s=45, marker="^", facecolors="none", edgecolors=color, transform=rug, zorder=3)
        labels.setdefault((whole, y), []).append(r["config"])
    for point, names in labels.items():
        ax.annotate(", ".join(names), point, fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.scatter([], [], s=45, color="k", label=_("whole cache at the measured length (residual included)"))
    packed_label = _("packed part alone: its memory ratio only (no quality measured there)")
    ax.scatter([], [], s=45, marker="^", facecolors="none", edgecolors="k", label=packed_label)
    ax.set_xlabel(_("KV bytes relative to a 16-bit cache of the same tokens"))
    ax.set_ylabel(_(quality_label))
    if rows:
        ys = [r[quality_key] for r in rows]
        span = max(max(ys) - min(ys), 0.1)
        ax.set_ylim(min(ys) - 0.15 * span, max(ys) + 0.08 * span)  # a bottom strip for the packed-part ticks
        # autoscaling ignores the ticks (their transform is half axes): x fits both ratios, room right for labels
        xs = [r[key] for r in rows for key in ("memory_ratio_16bit", "packed_ratio_16bit")]
        width = max(max(xs) - min(xs), 0.05)
        ax.set_xlim(min(xs) - 0.05 * width, max(xs) + 0.15 * width)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1)  # below the axes, over no point
    ax.set_title(title or _("Measured here: quality against the memory of the same run"))
    tight_layout_fitted(fig, grow=True)
    return fig


def references_markdown(references=PUBLISHED_REFERENCES) -> str:
    """The published results as a Markdown table of their own, marked external: measured otherwise, they share
    no axis with kvlab's measurements."""
    head = _("| | external result (not measured by kvlab) | its memory figure | source |")
    lines = [head, "|---|---|---|---|"]
    for index, r in enumerate(references, start=1):
        ratio = number(r["memory_ratio"], 2, grouping=False)
        meaning = _(r["memory_meaning"]) if "memory_meaning" in r else _("{ratio} of 16-bit").format(ratio=ratio)
        lines.append(f"| R{index} | {_(r['label'])} | {meaning} | {r['source']} |")
    return "\n".join(lines)
