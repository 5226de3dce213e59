"""Quantized caches: the split between packed low-bit data and the full-precision residual, and the
memory–quality frontier across backends and bit widths.

A QuantizedCache (KIVI-style) keeps the newest `residual_length` tokens in full precision and the rest packed.
At short lengths the residual dominates the bytes, so the compression the bit width promises only shows up
once the sequence is much longer than the residual.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.plots._figure import subplots

from kvlab.plots._snapshots import snapshots, tokens_seen
from kvlab.trace import Trace

# Published results, drawn as external references (other models, other benchmarks, other hardware).
# x: KV memory relative to a 16-bit cache; y: quality relative to the 16-bit cache (1.0 = same), None when the
# source states only a direction. Nothing here is measured by kvlab.
PUBLISHED_REFERENCES = (
    {"label": "HF blog: quanto int4 ≈ fp16 on LongBench", "memory_ratio": 4 / 16, "quality": 1.0,
     "source": "https://huggingface.co/blog/kv-cache-quantization"},
    {"label": "HF blog: quanto int2 degrades on LongBench", "memory_ratio": 2 / 16, "quality": None,
     "source": "https://huggingface.co/blog/kv-cache-quantization"},
    {"label": "KIVI 2-bit: ≈ same quality, 2.6× less peak memory (incl. weights)", "memory_ratio": 1 / 2.6,
     "quality": 1.0, "source": "https://arxiv.org/abs/2402.02750"},
)  # fmt: skip


def split_by_step(trace: Trace) -> list[dict]:
    """Per step: tokens seen, packed bytes, residual bytes, quantized and residual tokens (summed over layers)."""
    rows = []
    for step, layers in snapshots(trace):
        events = layers.values()
        rows.append({"step": step, "tokens": tokens_seen(layers, trace, step),
                     **{f: sum(e[f] for e in events) for f in ("packed_bytes", "residual_bytes", "quantized_tokens",
                                                               "residual_tokens")}})  # fmt: skip
    return rows


def plot_split(trace: Trace, title: str | None = None) -> Figure:
    """Stacked packed vs residual bytes against tokens for one quantized run; flushes show as drops."""
    rows = split_by_step(trace)
    tokens = [r["tokens"] for r in rows]
    fig, ax = subplots(figsize=(7, 4))
    ax.stackplot(tokens, [r["packed_bytes"] / 1e6 for r in rows], [r["residual_bytes"] / 1e6 for r in rows],
                 labels=["packed (quantized)", "residual (full precision)"], colors=["tab:purple", "tab:orange"],
                 alpha=0.7)  # fmt: skip
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("cache bytes (MB)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title or "Packed vs residual bytes")
    fig.tight_layout()
    return fig


def plot_configs(traces: dict[str, Trace], reference_bytes: int | None = None, title: str | None = None) -> Figure:
    """One bar per configuration: final packed and residual bytes stacked; a line at `reference_bytes`."""
    labels = list(traces)
    finals = [split_by_step(t)[-1] for t in traces.values()]
    fig, ax = subplots(figsize=(max(6, 0.8 * len(labels) + 2), 4))
    packed = [r["packed_bytes"] / 1e6 for r in finals]
    ax.bar(labels, packed, color="tab:purple", alpha=0.7, label="packed")
    ax.bar(labels, [r["residual_bytes"] / 1e6 for r in finals], bottom=packed, color="tab:orange", alpha=0.7,
           label="residual (full precision)")  # fmt: skip
    if reference_bytes:
        ax.axhline(reference_bytes / 1e6, color="k", ls="--", lw=1, label="DynamicCache")
    ax.set_ylabel("cache bytes (MB)")
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    ax.legend(fontsize=8)
    ax.set_title(title or "Packed vs residual bytes per configuration")
    fig.tight_layout()
    return fig


def plot_frontier(points: list[dict], references=PUBLISHED_REFERENCES, quality_label: str = "quality",
                  memory_label: str = "KV memory relative to a 16-bit cache of the same tokens",
                  title: str | None = None) -> Figure:  # fmt: skip
    """Memory–quality frontier. `points`: [{"label", "memory_ratio", "quality"}] measured here (filled dots);
    `references`: published points (hollow diamonds, labelled "external"), `quality=None` drawn as a down arrow.
    """
    fig, ax = subplots(figsize=(8, 5.4))
    for p in points:
        ax.scatter(p["memory_ratio"], p["quality"], s=40, zorder=3)
        ax.annotate(p["label"], (p["memory_ratio"], p["quality"]), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")  # fmt: skip
    notes = []
    for number, r in enumerate(references or (), start=1):
        y = r["quality"] if r["quality"] is not None else 1.0
        ax.scatter(r["memory_ratio"], y, marker="D", facecolors="none", edgecolors="grey", s=60, zorder=2)
        if r["quality"] is None:
            ax.annotate("", (r["memory_ratio"], y - 0.1), (r["memory_ratio"], y),
                        arrowprops={"arrowstyle": "->", "color": "grey"})  # fmt: skip
        ax.annotate(f"external R{number}", (r["memory_ratio"], y), fontsize=7, color="grey",
                    xytext=(0, 7 + 8 * (number % 2)), textcoords="offset points", ha="center")  # fmt: skip
        notes.append(f"R{number} (external, not measured here): {r['label']}")
    if notes:
        fig.text(0.01, 0.01, "\n".join(notes), fontsize=7, color="dimgrey", va="bottom")
        fig.subplots_adjust(bottom=0.1 + 0.035 * len(notes))
    ax.set_xlabel(memory_label)
    ax.set_ylabel(quality_label)
    ax.grid(alpha=0.3)
    ax.set_ylim(top=1.12)
    ax.set_title(title or "Memory–quality frontier (filled: measured here; hollow: published, external)")
    if not notes:
        fig.tight_layout()
    return fig
