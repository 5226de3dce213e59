"""transformers' paged cache (continuous batching, `generate_batch`) recorded by `kvlab.watch`."""

from __future__ import annotations

import pytest
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

import kvlab
from kvlab import _compat
from kvlab.caches.paged import InstrumentedPagedAttentionCache
from kvlab.measure.paged import paged_steps, paged_summary
from kvlab.recording.storage import storage_bytes
from kvlab.recording.trace import Trace

PAGE, BLOCKS = 4, 16


def _ids(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 120, (n,), generator=g).tolist() for n in lengths]


def _generate(model, ids, new_tokens=12, blocks=BLOCKS, page=PAGE):
    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1)
    cb = ContinuousBatchingConfig(page_size=page, num_blocks=blocks, max_batch_tokens=256)
    out = model.generate_batch(ids, generation_config=gen, continuous_batching_config=cb)
    return {rid: list(o.generated_tokens) for rid, o in out.items()}


@pytest.fixture(scope="module")
def paged_llama(tiny):
    model = tiny("tiny-llama")
    model.set_attn_implementation(_compat.PAGED_ATTN_IMPLEMENTATION)
    yield model
    model.set_attn_implementation("sdpa")


@pytest.fixture(scope="module")
def runs(paged_llama):
    """Four requests that do not all fit in 16 blocks of 4 tokens: some wait, one is preempted."""
    ids = _ids((5, 19, 11, 30))
    plain = _generate(paged_llama, ids)
    with kvlab.watch(paged_llama) as watch:
        watched = _generate(paged_llama, ids)
    return plain, watched, watch


def test_tokens_equal_plain_generate_batch(runs):
    plain, watched, _ = runs
    assert watched == plain and len(plain) == 4 and all(len(t) == 12 for t in plain.values())


def test_bytes_are_the_pool_storage(runs):
    _, _, watch = runs
    (cache,) = watch.caches
    storage = storage_bytes(cache.cache_tensor)
    meta = watch.trace.meta["paged"]
    assert storage == meta["storage_bytes"] == (meta["num_blocks"] + meta["trash_blocks"]) * meta["bytes_per_block"]
    assert {e["cache_bytes"] for e in watch.trace.updates} == {storage}
    assert sum(e["bytes_held"] for e in watch.trace.final_layers()) == storage
    assert watch.trace.summary()["peak_bytes"] == storage
    # every layer's slots (in use + cached + free + trash) are its share of the storage
    bytes_per_slot = meta["bytes_per_block"] // (meta["page_size"] * meta["num_layers"])
    for e in watch.trace.updates:
        slots = e["slots_allocated"] + e["slots_cached"] + e["slots_free"] + e["slots_trash"]
        assert slots * bytes_per_slot == e["bytes_held"]


def test_blocks_add_up_and_live_slots_match_request_lengths(runs):
    _, _, watch = runs
    meta = watch.trace.meta["paged"]
    for e in watch.trace.updates:
        assert e["blocks_in_use"] + e["blocks_free"] + e["blocks_cached"] == meta["num_blocks"]
        assert e["slots_allocated"] == e["blocks_in_use"] * PAGE
        assert e["slots_masked"] == e["slots_allocated"] - e["slots_live"] >= 0
    for row in paged_steps(watch.trace):
        tables, tokens = row["block_tables"], row["request_tokens"]
        assert row["slots_live"] == sum(tokens[r] for r in tables)  # no prefix shared here
        for rid, blocks in tables.items():
            assert len(blocks) == -(-tokens[rid] // PAGE)  # ceil: the last block is the only partly empty one
        assert row["slots_masked"] == sum(len(b) * PAGE - tokens[r] for r, b in tables.items())


def test_queueing_preemption_and_release_are_recorded(runs):
    _, _, watch = runs
    rows = paged_steps(watch.trace)
    summary = paged_summary(watch.trace)
    assert summary["finished"] == 4 and summary["peak_blocks_in_use"] == BLOCKS
    assert rows[0]["refused"], "a request that does not fit at first waits in the queue"
    assert summary["preemptions"] >= 1
    frees = [e for e in watch.trace.updates if e["op"] == "free" and "request_id" in e]
    for e in frees:
        assert e["blocks_to_pool"] + e["blocks_kept_cached"] + e["blocks_still_shared"] == e["blocks_released"] > 0
        if e["reason"] == "preempted":
            assert e["blocks_kept_cached"] == 0  # transformers frees a preempted request's blocks outright
    assert rows[-1]["blocks_in_use_after_free"] == 0
    assert watch.trace.final_layers()[0]["slots_allocated"] == 0


def test_prefix_sharing_reuses_cached_blocks(paged_llama):
    prefix = _ids((12,), seed=3)[0]
    ids = [prefix + [7], prefix + [9]]  # the second waits for blocks, then finds the first's complete blocks
    plain = _generate(paged_llama, ids, new_tokens=4, blocks=5)
    with kvlab.watch(paged_llama) as watch:
        watched = _generate(paged_llama, ids, new_tokens=4, blocks=5)
    assert watched == plain
    hits = {rid: n for row in paged_steps(watch.trace) for rid, n in row["prefix_hits"].items()}
    assert list(hits.values()) == [12]
    rows = paged_steps(watch.trace)
    at = next(i for i, r in enumerate(rows) if r["prefix_hits"])
    (rid,) = rows[at]["prefix_hits"]
    (first,) = [r for r in rows[at]["block_tables"] if r != rid]
    # the waiting request now holds the running one's 3 complete prefix blocks (12 tokens) instead of computing
    # them; the shared slots count once
    assert rows[at]["block_tables"][rid] == rows[at]["block_tables"][first][:3]
    assert rows[at]["slots_live"] == rows[at]["request_tokens"][first]
    assert rows[at]["blocks_in_use"] == 4
    (released,) = [e for e in watch.trace.updates if e.get("request_id") == first]
    assert (released["blocks_released"], released["blocks_still_shared"], released["blocks_to_pool"]) == (4, 3, 1)


def test_trace_round_trips_through_json(runs, tmp_path):
    _, _, watch = runs
    loaded = Trace.load(watch.trace.save(tmp_path / "paged.json"))
    assert paged_steps(loaded) == paged_steps(watch.trace)
    assert loaded.summary() == watch.trace.summary()


def test_leaving_the_block_restores_transformers(runs):
    _, _, watch = runs
    assert _compat.PAGED_CACHE_MODULE.PagedAttentionCache is _compat.PagedAttentionCache
    assert type(watch.caches[0]) is _compat.PagedAttentionCache
    assert watch.trace.updates  # the record stays readable


def test_restores_on_exception(paged_llama):
    with pytest.raises(RuntimeError, match="boom"):
        with kvlab.watch(paged_llama):
            assert _compat.PAGED_CACHE_MODULE.PagedAttentionCache is not _compat.PagedAttentionCache
            raise RuntimeError("boom")
    assert _compat.PAGED_CACHE_MODULE.PagedAttentionCache is _compat.PagedAttentionCache
    assert not paged_llama._forward_pre_hooks


def test_models_with_sliding_layers_run_unrecorded_with_a_warning(tiny):
    model = tiny("tiny-gemma3")
    model.set_attn_implementation(_compat.PAGED_ATTN_IMPLEMENTATION)
    try:
        ids = _ids((6, 9))
        plain = _generate(model, ids, new_tokens=4)
        with pytest.warns(UserWarning, match="all full attention.*sliding"):
            with kvlab.watch(model) as watch:
                assert _compat.PAGED_CACHE_MODULE.PagedAttentionCache is _compat.PagedAttentionCache
                watched = _generate(model, ids, new_tokens=4)
    finally:
        model.set_attn_implementation("sdpa")
    assert watched == plain and watch.traces == []


def test_instrumented_class_is_a_paged_cache():
    assert issubclass(InstrumentedPagedAttentionCache, _compat.PagedAttentionCache)
