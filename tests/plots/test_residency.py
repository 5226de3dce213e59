import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure.residency import device_bytes_by_step
from kvlab.plots import residency


def _bar_heights(ax) -> list[float]:
    """Total height of each stacked bar (full-layer part + sliding part share an x)."""
    heights: dict[float, float] = {}
    for patch in ax.patches:
        x = round(patch.get_x(), 6)
        heights[x] = heights.get(x, 0.0) + patch.get_height()
    return sorted(heights.values())


def test_plot_device_bytes_draws_each_steps_device_peak(traces):
    named = {"offloaded": traces["offloaded_sliding"], "dynamic": traces["sliding"]}
    fig = residency.plot_device_bytes(named, title="t")
    ax = fig.axes[0]
    rows = [r for t in named.values() for r in device_bytes_by_step(t)]
    assert len(ax.patches) == 2 * len(rows)  # a full-layer part and a sliding part per step and trace
    assert ax.get_ylabel() == "KiB on the device at the step's peak"  # a tiny model's bytes: KiB, not 0.0x MiB
    assert _bar_heights(ax) == pytest.approx(sorted(r["device_peak_bytes"] / 2**10 for r in rows))
    assert ax.get_title() == "t"
    assert ax.get_legend().get_bbox_to_anchor().x0 >= ax.bbox.x1  # outside the axes: it covers no bar


def test_a_single_watched_trace_is_accepted(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(12)
    with kvlab.watch(model) as watch:
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=2,
            past_key_values=DynamicCache(config=model.config, offloading=True),
        )
    fig = residency.plot_device_bytes(watch.trace)
    assert len(fig.axes[0].patches) == 2 * 2
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert all(label.endswith("%") for label in labels) and len(labels) == 2
