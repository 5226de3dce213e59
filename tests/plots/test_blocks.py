"""Block-allocation figures of a paged trace (kvlab.plots.blocks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

from kvlab import _compat
from kvlab.measure.paged import paged_steps
from kvlab.plots import blocks, palette
from kvlab.serving import layout_rows
from kvlab.units import binary_unit

STATES = {getattr(palette, state) for state in ("LIVE", "MASKED", "FREE", "ALLOCATED", "EVICTED", "CROPPED", "CACHED")}


@pytest.fixture(scope="module")
def paged_trace():
    import kvlab

    model = kvlab.tiny_model("tiny-llama")
    model.set_attn_implementation(_compat.PAGED_ATTN_IMPLEMENTATION)
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(3, 120, (n,), generator=g).tolist() for n in (6, 14, 9)]
    with kvlab.watch(model) as watch:
        model.generate_batch(
            ids,
            generation_config=GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=-1),
            continuous_batching_config=ContinuousBatchingConfig(page_size=4, num_blocks=12, max_batch_tokens=256),
        )
    return watch.trace


def test_grid_marks_each_request_blocks_and_free_ones(paged_trace):
    grid = blocks.block_grid(paged_trace)
    rows = paged_steps(paged_trace)
    assert grid.shape == (12, len(rows))
    for col, row in enumerate(rows):
        held = int((grid[:, col] >= 0).sum())
        assert held == row["blocks_in_use"]
        assert int((grid[:, col] == blocks.CACHED).sum()) == row["blocks_cached"]
        assert int((grid[:, col] == blocks.FREE).sum()) == row["blocks_free"]
    assert set(np.unique(grid[grid >= 0])) == set(range(len(blocks.request_order(paged_trace))))


def test_timeline_draws_grid_and_stacked_counts(paged_trace):
    fig = blocks.plot_block_timeline(paged_trace)
    top, bottom = fig.axes[:2]
    assert top.images[0].get_array().shape == (12, len(paged_steps(paged_trace)))
    assert len(bottom.collections) >= 3  # in use, cached, free


def test_timeline_colours_requests_as_requests_and_blocks_as_states(paged_trace):
    """A request drawn in the cached colour (or a state's grey or red) would read as a state: one palette."""
    from matplotlib.colors import to_hex

    fig = blocks.plot_block_timeline(paged_trace)
    top, bottom = fig.axes[:2]
    order = blocks.request_order(paged_trace)
    cmap = top.images[0].get_cmap()
    assert [to_hex(c) for c in cmap.colors[:2]] == [palette.CACHED, palette.FREE]  # grid codes -2, -1 (+2)
    requests = [to_hex(c) for c in cmap.colors[2 : 2 + len(order)]]
    assert requests == [palette.request(i) for i in range(len(order))]
    assert not set(requests) & STATES
    legend = {label: to_hex(handle.get_color()) for handle, label in zip(*top.get_legend_handles_labels())}
    assert legend["cached"] == palette.CACHED and legend[order[0]] == palette.request(0)
    stack = [to_hex(c.get_facecolor()[0]) for c in bottom.collections[:3]]
    assert stack == [palette.LIVE, palette.CACHED, palette.FREE]


def test_layout_bars_stack_live_under_empty_to_the_reserved_bytes():
    rows = layout_rows([10, 20], 4, max_cache_len=32, block_sizes=(4, 16))
    fig = blocks.plot_layouts(rows)
    patches = fig.axes[0].patches
    assert len(patches) == 2 * len(rows)
    live, empty = patches[: len(rows)], patches[len(rows) :]
    unit, scale = binary_unit(max(r["bytes_held"] for r in rows))
    assert fig.axes[0].get_ylabel() == f"bytes ({unit})"  # the unit the largest reaches: bytes here, not 0.000 MiB
    assert max(r["bytes_held"] for r in rows) / scale >= 1
    for row, low, high in zip(rows, live, empty):
        assert abs(low.get_height() - row["bytes_live"] / scale) < 1e-12
        assert abs(low.get_height() + high.get_height() - row["bytes_held"] / scale) < 1e-12


def test_the_legend_lists_requests_by_name_whoever_was_served_first(paged_trace):
    fig = blocks.plot_block_timeline(paged_trace)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    order = blocks.request_order(paged_trace)
    assert labels[: len(order)] == sorted(order, key=lambda rid: int(rid.rsplit("_", 1)[1]))
    assert fig.axes[0].get_legend().get_texts()[0].get_fontsize() >= 9


def _lab(colour: str):
    """CIELAB (D65) of an sRGB colour: distances in it are differences a reader sees (CIE76 delta E)."""
    from matplotlib.colors import to_rgb

    linear = np.array([c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)])
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz / np.array([0.95047, 1.0, 1.08883])]
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_the_palette_gives_the_workloads_requests_colours_a_reader_tells_apart():
    """Notebook 12 serves eight requests at once: no two requests, and no request and a block's state, look alike
    (req_5 in tab20b's gold read as req_7's orange)."""
    colours = [palette.request(i) for i in range(8)]
    assert len(set(colours)) == 8 and not set(colours) & STATES
    apart = min(np.linalg.norm(_lab(a) - _lab(b)) for i, a in enumerate(colours) for b in colours[i + 1 :])
    from_states = min(
        np.linalg.norm(_lab(c) - _lab(s)) for c in colours for s in (palette.CACHED, palette.FREE, palette.LIVE)
    )
    assert apart > 30 and from_states > 30, (apart, from_states)


def test_layout_bars_are_named_in_the_readers_language(monkeypatch):
    """The rows keep their English key (`layout`, what code looks up); the bars show `name`, the cache kind's word."""
    from kvlab.serving import layouts

    monkeypatch.setattr(layouts, "cache_kind_label", lambda kind: f"<{kind}>")
    rows = layout_rows([10, 20], 4, max_cache_len=32, block_sizes=(16,))
    assert [r["layout"] for r in rows] == ["static", "dynamic", "paged 16"]
    ticks = [t.get_text() for t in blocks.plot_layouts(rows).axes[0].get_xticklabels()]
    assert ticks == ["<static>", "<dynamic>", "<paged> 16"]
