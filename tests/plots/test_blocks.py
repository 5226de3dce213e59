"""Block-allocation figures of a paged trace (kvlab.plots.blocks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

from kvlab import _compat
from kvlab.caches.paged import paged_steps
from kvlab.plots import blocks
from kvlab.serving import layout_rows


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


def test_layout_bars_one_pair_per_layout():
    rows = layout_rows([10, 20], 4, max_cache_len=32, block_sizes=(4, 16))
    fig = blocks.plot_layouts(rows)
    assert len(fig.axes[0].patches) == 2 * len(rows)
