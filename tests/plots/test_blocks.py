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


def test_timeline_colours_requests_as_series_and_blocks_as_states(paged_trace):
    """A request drawn in the cached colour (or a state's grey or red) would read as a state: one palette."""
    from matplotlib.colors import to_hex

    fig = blocks.plot_block_timeline(paged_trace)
    top, bottom = fig.axes[:2]
    order = blocks.request_order(paged_trace)
    cmap = top.images[0].get_cmap()
    assert [to_hex(c) for c in cmap.colors[:2]] == [palette.CACHED, palette.FREE]  # grid codes -2, -1 (+2)
    requests = [to_hex(c) for c in cmap.colors[2 : 2 + len(order)]]
    assert requests == [palette.series(i) for i in range(len(order))]
    assert not set(requests) & STATES
    legend = {label: to_hex(handle.get_color()) for handle, label in zip(*top.get_legend_handles_labels())}
    assert legend["cached"] == palette.CACHED and legend[order[0]] == palette.series(0)
    stack = [to_hex(c.get_facecolor()[0]) for c in bottom.collections[:3]]
    assert stack == [palette.LIVE, palette.CACHED, palette.FREE]


def test_layout_bars_stack_live_under_empty_to_the_reserved_bytes():
    rows = layout_rows([10, 20], 4, max_cache_len=32, block_sizes=(4, 16))
    fig = blocks.plot_layouts(rows)
    patches = fig.axes[0].patches
    assert len(patches) == 2 * len(rows)
    live, empty = patches[: len(rows)], patches[len(rows) :]
    for row, low, high in zip(rows, live, empty):
        assert abs(low.get_height() - row["bytes_live"] / 2**20) < 1e-12
        assert abs(low.get_height() + high.get_height() - row["bytes_held"] / 2**20) < 1e-12


def test_the_palette_gives_the_workloads_requests_distinct_colours():
    """Notebook 12 serves eight requests at once: none may share a colour with another or with a slot state."""
    colours = [palette.series(i) for i in range(8)]
    assert len(set(colours)) == 8
    assert not set(colours) & STATES
