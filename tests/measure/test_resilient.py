import pytest
import torch

import kvlab
from kvlab.measure import resilient


def _generate(model, ids, cache, n=6):
    return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, cache=cache)


def test_offloaded_cache_holds_less_on_the_device(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    dynamic = resilient.budgeted_cache("dynamic", model.config, None)
    offloaded = resilient.budgeted_cache("offloaded", model.config, None)
    assert torch.equal(_generate(model, ids, dynamic), _generate(model, ids, offloaded))
    assert dynamic.peak_device_bytes == dynamic.trace.summary()["peak_bytes"]
    assert 0 < offloaded.peak_device_bytes < dynamic.peak_device_bytes


def test_budget_raises_an_out_of_memory_error(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = resilient.budgeted_cache("dynamic", model.config, 1000)
    with pytest.raises(torch.OutOfMemoryError, match="budget is 1,000 bytes"):
        _generate(model, prompt_ids(10), cache)


def test_resilient_generate_falls_back_to_offloaded(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    expected = _generate(model, ids, kvlab.make_cache("dynamic", model.config))
    full = resilient.budgeted_cache("dynamic", model.config, None)
    _generate(model, ids, full)
    budget = full.peak_device_bytes * 3 // 4  # offloaded holds 2 of the 3 layers: the current and the next
    logged = []
    output, cache, attempts = resilient.resilient_generate(
        model, ids, budget_bytes=budget, log=logged.append, max_new_tokens=6
    )
    assert torch.equal(output, expected)
    assert [a["cache"] for a in attempts] == ["dynamic", "offloaded"] and [a["ok"] for a in attempts] == [False, True]
    assert cache.offloading and cache.peak_device_bytes <= budget
    assert any("retrying" in line for line in logged)


def test_resilient_generate_gives_up_when_even_offloading_does_not_fit(tiny, prompt_ids):
    with pytest.raises(torch.OutOfMemoryError, match="even with the offloaded cache"):
        resilient.resilient_generate(
            tiny("tiny-llama"), prompt_ids(10), budget_bytes=10, log=lambda _: None, max_new_tokens=3
        )


def test_device_peak_of_offloaded_static_is_a_fraction_of_its_allocation(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(8)
    dynamic = resilient.device_peak(model, ids, "dynamic", max_new_tokens=4)
    static = resilient.device_peak(model, ids, "offloaded_static", max_new_tokens=4, max_cache_len=32)
    assert dynamic["token_ids"] == static["token_ids"]
    assert dynamic["peak_device_bytes"] == dynamic["peak_cache_bytes"] and dynamic["transfers"] == 0
    assert static["peak_device_bytes"] < static["peak_cache_bytes"] and static["transfers"] > 0


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
    assert [t.meta["cache"] for t in watch.traces] == ["dynamic", "offloaded"]
    assert budget < device.peak_bytes  # the failed attempt's
    [where] = device.out_of_memory  # the dynamic attempt ran out once, the offloaded retry never
    assert where["bytes"] > budget and 0 <= where["layer_idx"] < model.config.num_hidden_layers
    assert f"layer {where['layer_idx']}, step {where['step']};" in str(excinfo.value)
    assert not model._forward_pre_hooks and not any(layer._forward_hooks for layer in resilient.decoder_layers(model))


def test_simulated_device_needs_a_watch(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(5)
    with pytest.raises(RuntimeError, match="kvlab.watch"):
        with resilient.simulated_device(model, budget_bytes=10**9):
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=2)
    assert not model._forward_pre_hooks
