"""The quality–memory frontier: cache bytes against quality loss, one point per measured configuration,
with published results drawn apart as external references (vertical markers at their stated memory ratio)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from kvlab.bench.published import PUBLISHED


def frontier_points(rows: list[dict]) -> list[dict]:
    """(label, memory ratio vs dynamic, perplexity change %) of every measured row that has both."""
    return [{"label": r["label"], "memory_ratio": r["ratio_vs_dynamic"], "quality": r["perplexity_delta_pct"]}
            for r in rows if r.get("status") == "measured" and r.get("ratio_vs_dynamic") is not None
            and r.get("perplexity_delta_pct") is not None]  # fmt: skip


def frontier(rows: list[dict], title: str = "", published: list[dict] | None = PUBLISHED):
    """A Figure: x = peak cache bytes ÷ dynamic's, y = perplexity change vs dynamic (%)."""
    points = frontier_points(rows)
    with plt.ioff():
        fig, ax = plt.subplots(figsize=(8, 5))
        for p in points:
            ax.scatter(p["memory_ratio"], p["quality"], s=40, color="tab:blue", zorder=3)
            ax.annotate(p["label"], (p["memory_ratio"], p["quality"]), textcoords="offset points", xytext=(5, 4),
                        fontsize=8)  # fmt: skip
        for i, ref in enumerate(published or []):
            ax.axvline(ref["memory_ratio"], color="tab:orange", linestyle="--", linewidth=1, zorder=1)
            ax.text(ref["memory_ratio"], 0.98 - 0.12 * i, f" external: {ref['label']}\n {ref['claim']}",
                    transform=ax.get_xaxis_transform(), fontsize=7, color="tab:orange", va="top")  # fmt: skip
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_xlabel("peak cache bytes ÷ dynamic cache (kvlab measured)")
        ax.set_ylabel("perplexity change vs dynamic (%)")
        ax.set_xlim(0, max([1.1] + [p["memory_ratio"] * 1.1 for p in points]))
        ax.set_title(title or "quality–memory frontier (blue: measured here; orange dashed: published, not kvlab)")
        fig.tight_layout()
    return fig
