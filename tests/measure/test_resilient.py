"""`kvlab.measure.resilient`: a pretend accelerator that raises a real `torch.OutOfMemoryError` subclass when the
watched KV cache outgrows it, so the cache guide's fallback to the offloaded cache can be tried on a CPU."""

import pytest
import torch

import kvlab
from kvlab.measure import residency, resilient


def test_an_offloaded_cache_holds_less_on_the_simulated_device(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    peaks, outputs = {}, {}
    for kind in ("dynamic", "offloaded"):
        with kvlab.watch(model) as watch, resilient.simulated_device(model, budget_bytes=10**9) as device:
            outputs[kind] = greedy(model, ids, new_tokens=6, cache_implementation=kind)
        assert device.peak_bytes == residency.device_peak(watch.trace)  # the live count is the trace's
        peaks[kind] = device.peak_bytes
    assert torch.equal(outputs["dynamic"], outputs["offloaded"])
    assert 0 < peaks["offloaded"] < peaks["dynamic"]


def test_simulated_device_raises_an_out_of_memory_error_and_lets_offloading_retry(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    kwargs = {"attention_mask": torch.ones_like(ids), "do_sample": False, "max_new_tokens": 6}
    expected = model.generate(ids, **kwargs)
    with kvlab.watch(model) as watch, resilient.simulated_device(model, budget_bytes=10**9) as roomy:
        model.generate(ids, **kwargs)
    budget = roomy.peak_bytes * 3 // 4  # offloaded holds 2 of the 3 layers: the current and the next
    assert roomy.peak_bytes == watch.trace.summary()["peak_bytes"]
    with kvlab.watch(model) as watch, resilient.simulated_device(model, budget_bytes=budget) as device:
        with pytest.raises(torch.OutOfMemoryError, match=f"has {budget:,} bytes") as excinfo:
            model.generate(ids, **kwargs)
        output = model.generate(ids, cache_implementation="offloaded", **kwargs)  # the guide's fallback
    assert torch.equal(output, expected)
    assert [t.meta["cache_kind"] for t in watch.traces] == ["dynamic", "offloaded"]
    assert budget < device.peak_bytes  # the failed attempt's
    [where] = device.out_of_memory  # the dynamic attempt ran out once, the offloaded retry never
    assert where["bytes"] > budget and 0 <= where["layer_idx"] < model.config.num_hidden_layers
    assert f"layer {where['layer_idx']}, step {where['step']};" in str(excinfo.value)
    assert not model._forward_pre_hooks and not any(layer._forward_hooks for layer in resilient.decoder_layers(model))


def test_a_cropped_cache_is_counted_at_what_it_holds_now(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    cache = kvlab.make_cache("dynamic", model.config)
    with kvlab.watch(model), resilient.simulated_device(model, budget_bytes=10**9) as device:
        model(ids, cache=cache)
        full = device.peak_bytes
        cache.crop(-8)  # 2 of 10 tokens left: the crop keeps views of the old storage until the next update
        model(prompt_ids(1, seed=1), cache=cache)  # the update concatenates: 3 tokens
    assert residency.device_bytes_at_last_update(cache.trace) == 3 * full // 10 < full == device.peak_bytes


def test_simulated_device_needs_a_watch(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(5)
    with pytest.raises(RuntimeError, match="kvlab.watch"):
        with resilient.simulated_device(model, budget_bytes=10**9):
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=2)
    assert not model._forward_pre_hooks
