"""Device-resident bytes read from a trace: kvlab's one count of them (the simulated accelerator of
`kvlab.measure.resilient` checks it live), against hand counts and across the two ways a cache is recorded."""

import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure import residency


def _watched(model, ids, cache=None, n=4, **kwargs):
    with kvlab.watch(model) as watch:
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, past_key_values=cache, **kwargs
        )
    return out, watch.trace


@pytest.mark.parametrize("only_non_sliding", [True, False])
def test_a_watched_offloaded_cache_and_kvlabs_own_hold_the_same_on_the_device(tiny, prompt_ids, only_non_sliding):
    model, ids = tiny("tiny-gemma3"), prompt_ids(20)  # window 8: the sliding layers cap, the full ones grow
    cache = DynamicCache(config=model.config, offloading=True, offload_only_non_sliding=only_non_sliding)
    _, watched = _watched(model, ids, cache)
    own = kvlab.run(model, None, ids, "offloaded", max_new_tokens=4, offload_only_non_sliding=only_non_sliding)
    assert residency.device_peak(watched) == residency.device_peak(own.trace) > 0
    assert residency.device_bytes_by_step(watched) == residency.device_bytes_by_step(own.trace)


@pytest.mark.parametrize("kind, options", [("offloaded", {}), ("offloaded_static", {"max_cache_len": 32})])
def test_an_offloaded_cache_holds_two_of_its_layers_on_the_device(tiny, prompt_ids, kind, options):
    """tiny-llama's 3 equal layers: the one computing and the one prefetched, at most (the last layer prefetches
    the first, which already holds the step's token): 2 of the 3 layers' bytes at the peak."""
    model, ids = tiny("tiny-llama"), prompt_ids(8)
    trace = kvlab.run(model, None, ids, kind, max_new_tokens=4, **options).trace
    layer = trace.final_layers()[0]["bytes_held"]  # a dynamic layer's 11 tokens, or a static one's 32 slots
    assert residency.device_peak(trace) == 2 * layer < trace.summary()["peak_bytes"] == 3 * layer
    assert residency.device_bytes_at_last_update(trace) == 2 * layer
    assert len(residency.effective_moves(trace)) > 0


def test_an_ordinary_cache_is_all_on_the_device(tiny, prompt_ids):
    _, trace = _watched(tiny("tiny-llama"), prompt_ids(10))
    rows = residency.device_bytes_by_step(trace)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["device_peak_bytes"] == r["cache_bytes_at_peak"] == r["cache_bytes"] for r in rows)
    assert [r["cache_bytes"] for r in rows] == trace.bytes_by_step()
    assert all(r["resident_at_peak"] == [0, 1, 2] for r in rows)


def test_only_non_sliding_keeps_every_sliding_layer_and_two_full_layers(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(20)
    kinds = kvlab.recording.layer_state.layer_kinds(model.config)
    sliding = [i for i, k in enumerate(kinds) if k == "sliding"]
    _, kept = _watched(model, ids, DynamicCache(config=model.config, offloading=True, offload_only_non_sliding=True))
    _, moved = _watched(model, ids, DynamicCache(config=model.config, offloading=True, offload_only_non_sliding=False))
    for row in residency.device_bytes_by_step(kept)[1:]:
        assert set(sliding) <= set(row["resident_at_peak"])
        assert row["device_bytes_by_layer_kind"]["sliding"] > 0
    for row in residency.device_bytes_by_step(moved)[1:]:
        assert len(row["resident_at_peak"]) == 2  # the layer computing and the one prefetched
        assert row["device_peak_bytes"] < row["cache_bytes_at_peak"]
    assert residency.device_peak(moved) < residency.device_peak(kept)


@pytest.fixture(scope="module")
def offloaded_trace():
    """tiny-llama (3 full layers) with an offloaded cache: 6 prompt tokens, 4 new ones."""
    ids = torch.randint(3, kvlab.models.tiny.TINY_VOCAB, (1, 6), generator=torch.Generator().manual_seed(0))
    return kvlab.run(kvlab.tiny_model("tiny-llama"), None, ids, "offloaded", max_new_tokens=4).trace


def test_update_is_placed_between_prefetch_and_offload(offloaded_trace):
    events = residency.schedule(offloaded_trace, (1, 1))
    for i, e in enumerate(events):
        if e["type"] == "update":
            later = events[i + 1]
            assert (later["type"], later["direction"], later["layer_idx"]) == ("transfer", "offload", e["layer_idx"])


def test_each_decode_step_makes_every_layer_resident_once(offloaded_trace):
    intervals = residency.resident_intervals(offloaded_trace, steps=(1, 1))
    assert sorted(r["layer_idx"] for r in intervals if not r.get("open")) == [0, 1, 2]
    assert [r["layer_idx"] for r in intervals if r.get("open")] == [0]  # prefetched for the next step
    assert all(r["end"] > r["start"] for r in intervals)


def test_sliding_layers_kept_resident_with_offload_only_non_sliding():
    import torch

    import kvlab

    gemma = kvlab.tiny_model("tiny-gemma3")
    ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    trace = kvlab.run(gemma, None, ids, "offloaded", offload_only_non_sliding=True, max_new_tokens=3).trace
    never = {r["layer_idx"] for r in residency.resident_intervals(trace, steps=(1, 2)) if r.get("never_offloaded")}
    assert never == {0, 1, 3, 4}  # the sliding layers of [sliding, sliding, full] * 2


def test_effective_moves_drop_prefetches_of_resident_layers():
    import torch

    import kvlab

    gemma = kvlab.tiny_model("tiny-gemma3")
    ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    trace = kvlab.run(gemma, None, ids, "offloaded", offload_only_non_sliding=True, max_new_tokens=3).trace
    moves = residency.effective_moves(trace)
    assert len(moves) < len(trace.transfers)  # each sliding layer re-requests the next full layer
    assert {e["layer_idx"] for e in moves} == {2, 5}
    decode = [e for e in moves if e["step"] == 1]
    # layer 2's update prefetches layer 5; layer 5's update wraps around and prefetches layer 2 for the next step
    assert [(e["direction"], e["layer_idx"]) for e in decode] == [
        ("prefetch", 5),
        ("offload", 2),
        ("prefetch", 2),
        ("offload", 5),
    ]


def test_effective_moves_keep_every_move_when_all_layers_travel(offloaded_trace):
    trace = offloaded_trace
    assert residency.effective_moves(trace) == trace.transfers
