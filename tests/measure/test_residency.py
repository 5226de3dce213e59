"""Device-resident bytes read from a watched trace, checked against the budget check that counts them live."""

import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure import residency, resilient


def _watched(model, ids, cache=None, n=4, **kwargs):
    with kvlab.watch(model) as watch:
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, past_key_values=cache, **kwargs
        )
    return out, watch.trace


@pytest.mark.parametrize("only_non_sliding", [True, False])
def test_offloaded_peak_matches_the_live_budget_count(tiny, prompt_ids, only_non_sliding):
    model, ids = tiny("tiny-gemma3"), prompt_ids(20)  # window 8: the sliding layers cap, the full ones grow
    cache = DynamicCache(config=model.config, offloading=True, offload_only_non_sliding=only_non_sliding)
    _, trace = _watched(model, ids, cache)
    live = resilient.device_peak(model, ids, "offloaded", max_new_tokens=4, offload_only_non_sliding=only_non_sliding)
    assert residency.device_peak(trace) == live["peak_device_bytes"] > 0


def test_an_ordinary_cache_is_all_on_the_device(tiny, prompt_ids):
    _, trace = _watched(tiny("tiny-llama"), prompt_ids(10))
    rows = residency.device_bytes_by_step(trace)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["device_peak_bytes"] == r["cache_bytes_at_peak"] == r["cache_bytes"] for r in rows)
    assert [r["cache_bytes"] for r in rows] == trace.bytes_by_step()
    assert all(r["resident_at_peak"] == [0, 1, 2] for r in rows)


def test_only_non_sliding_keeps_every_sliding_layer_and_two_full_layers(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(20)
    kinds = kvlab.layer_state.layer_kinds(model.config)
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
