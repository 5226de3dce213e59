"""The bytes an offloaded cache's schedule hands over, checked against the layers' tensor sizes; the estimate and
the interleaved decode timing around them."""

import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure import offload_time, residency, step_times
from kvlab.recording.layer_state import layer_kinds


def _layer_token_bytes(config, batch: int) -> int:
    """Bytes one token adds to one layer: keys and values, float32."""
    return 2 * batch * config.num_key_value_heads * config.head_dim * 4


def _watched(model, ids, n=4, **kwargs):
    with kvlab.watch(model) as watch:
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, **kwargs)
    return watch.trace, watch.caches[0]


@pytest.mark.parametrize("batch", [1, 2])
def test_offloaded_bytes_are_every_layer_moved_out_and_back(prompt_ids, device, batch):
    model = kvlab.tiny_model("tiny-llama", device=device)
    prompt, layers = 6, model.config.num_hidden_layers
    b = _layer_token_bytes(model.config, batch)
    trace, _ = _watched(model, prompt_ids(prompt, batch=batch).to(device), cache_implementation="offloaded")
    rows = offload_time.transfer_bytes_by_step(trace)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    # prefill: each layer created on the device and offloaded with the prompt; the last prefetches layer 0
    assert rows[0]["offload_bytes"] == layers * b * prompt
    assert rows[0]["prefetch_bytes"] == b * prompt
    for r in rows[1:]:
        held = prompt + r["step"]  # tokens a layer holds after this step's update
        assert r["offload_bytes"] == layers * b * held  # every layer leaves with the new token
        assert r["prefetch_bytes"] == (layers - 1) * b * (held - 1) + b * held  # layers 1.. before, layer 0 after
        assert r["bytes"] == r["offload_bytes"] + r["prefetch_bytes"] and r["moves"] == 2 * layers
    assert [r["offload_bytes"] for r in rows] == trace.bytes_by_step()  # each step offloads the whole cache

    traffic = offload_time.offload_traffic(trace)
    assert traffic["batch"] == batch and traffic["generated_tokens"] == 4 * batch and traffic["decode_steps"] == 3
    assert traffic["total_bytes"] == sum(r["bytes"] for r in rows)
    assert traffic["decode_bytes"] == traffic["bytes_per_decode_step"] * 3 == sum(r["bytes"] for r in rows[1:])
    assert traffic["offload_bytes_per_decode_step"] * 3 == sum(r["offload_bytes"] for r in rows[1:])
    assert traffic["bytes_per_generated_token"] == traffic["total_bytes"] / (4 * batch)

    # what `moved` (src != dst) and `work_by_step` say depends on the device; the schedule's bytes do not
    work = trace.work_by_step()
    if device.type == "cpu":
        assert traffic["crossed_bytes"] == 0
        assert all(w["offload_bytes"] == w["prefetch_bytes"] == 0 for w in work)
    else:
        assert traffic["crossed_bytes"] == traffic["total_bytes"]
        assert [(w["offload_bytes"], w["prefetch_bytes"]) for w in work] == [
            (r["offload_bytes"], r["prefetch_bytes"]) for r in rows
        ]


def test_offloaded_static_moves_whole_allocations(tiny, prompt_ids):
    model = tiny("tiny-llama")
    trace, cache = _watched(model, prompt_ids(6), cache_implementation="offloaded_static")
    allocated = cache.layers[0].max_cache_len
    per_move = _layer_token_bytes(model.config, 1) * allocated
    layers = model.config.num_hidden_layers
    rows = offload_time.transfer_bytes_by_step(trace)
    assert rows[0]["offload_bytes"] == layers * per_move and rows[0]["prefetch_bytes"] == per_move
    for r in rows[1:]:
        assert r["offload_bytes"] == r["prefetch_bytes"] == layers * per_move  # the same bytes at every step


def test_an_ordinary_cache_moves_nothing(tiny, prompt_ids):
    trace, _ = _watched(tiny("tiny-llama"), prompt_ids(6))
    rows = offload_time.transfer_bytes_by_step(trace)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["bytes"] == r["moves"] == 0 for r in rows)
    assert offload_time.offload_traffic(trace)["bytes_per_decode_step"] == 0


def test_only_non_sliding_counts_the_full_layers_and_no_repeated_prefetch(tiny, prompt_ids):
    model, prompt = tiny("tiny-gemma3"), 20  # window 8; full layers 2 and 5 hold every token
    cache = DynamicCache(config=model.config, offloading=True, offload_only_non_sliding=True)
    trace, _ = _watched(model, prompt_ids(prompt), past_key_values=cache)
    full = [i for i, kind in enumerate(layer_kinds(model.config)) if kind == "full"]
    b = _layer_token_bytes(model.config, 1)
    rows = offload_time.transfer_bytes_by_step(trace)
    assert len(trace.transfers) > sum(r["moves"] for r in rows) == len(residency.effective_moves(trace))
    assert {e["layer_idx"] for e in residency.effective_moves(trace)} == set(full)
    assert rows[0]["offload_bytes"] == len(full) * b * prompt
    for r in rows[1:]:
        held = prompt + r["step"]
        assert r["offload_bytes"] == len(full) * b * held
        # the second full layer before its update, the first one for the next step after its update
        assert r["prefetch_bytes"] == b * (held - 1) + b * held


def test_pcie_estimate_is_bytes_over_the_stated_bandwidth():
    estimate = offload_time.pcie_estimate(50e9)
    assert estimate.bandwidth == offload_time.PCIE4_X16_EFFECTIVE_BYTES_PER_S == 25e9
    assert estimate.seconds == 2.0
    assert offload_time.pcie_estimate(1_000, bandwidth=1e6).seconds == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="bandwidth"):
        offload_time.pcie_estimate(1_000, bandwidth=0)
    with pytest.raises(ValueError, match="negative"):
        offload_time.pcie_estimate(-1)


def test_offloaded_decoding_is_timed_per_decoded_token_by_the_one_decode_loop(tiny, prompt_ids, monkeypatch):
    """Notebook 03 times the offloaded cache with `step_times.decode_step_times` inside `kvlab.watch`: warm-ups,
    then the two configurations interleaved, each repeat one generation timed per decoded token."""
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    calls, generate = [], model.generate

    def recorded(*args, **kwargs):
        calls.append(kwargs.get("cache_implementation", "dynamic"))
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recorded)
    configs = {"dynamic": {}, "offloaded": {"cache_implementation": "offloaded"}}
    with kvlab.watch(model):
        times = step_times.decode_step_times(model, ids, configs, new_tokens=4, repeats=3, warmup=1)
    assert calls == ["dynamic", "offloaded"] + ["dynamic", "offloaded"] * 3  # warm-ups, then interleaved
    assert set(times) == {"dynamic", "offloaded"}
    assert all(len(t.decode.times) == 3 and all(s > 0 for s in t.decode.times) for t in times.values())
    with pytest.raises(ValueError, match="at least 2"):
        step_times.decode_step_times(model, ids, {"short": {}}, new_tokens=1, repeats=1, warmup=0)
