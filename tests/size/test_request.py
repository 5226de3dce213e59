"""`kvlab.size.request`: the bytes a generation's cache would hold at its most, from the config alone."""

import pytest

from kvlab.model_facts import model_facts
from kvlab.models.tiny import tiny_config
from kvlab.size import cache_size, from_config
from kvlab.size.request import most_length, request_bytes, requested_length


def test_the_prediction_is_the_size_calculators():
    llama = model_facts(tiny_config("tiny-llama"))
    arch = from_config(llama)
    facts = {"prompt_tokens": 6, "cached_tokens": 8}
    assert request_bytes(llama, "dynamic", {}, **facts) == cache_size(arch, "dynamic", 8, prefill=6).peak_bytes
    # a static cache at generate's size (cached tokens), or at its own max_cache_len
    assert request_bytes(llama, "static", {}, **facts) == 3 * 2 * 2 * 16 * 4 * 8
    assert request_bytes(llama, "static", {"max_cache_len": 100}, **facts, batch=2) == 2 * 3 * 2 * 2 * 16 * 4 * 100
    assert request_bytes(llama, "static", {"max_cache_len": 100}, **facts, dtype="bfloat16") == 3 * 2 * 2 * 16 * 2 * 100
    gemma = model_facts(tiny_config("tiny-gemma3"))  # sliding layers keep a window of 8
    expected = cache_size(from_config(gemma), "static", 50, prefill=6, max_cache_len=50).peak_bytes
    assert request_bytes(gemma, "static", {}, prompt_tokens=6, cached_tokens=50) == expected
    bart = model_facts(tiny_config("tiny-bart"))  # the encoder's 40 tokens fill the cross-attention cache
    expected = cache_size(from_config(bart), "dynamic", 5, prefill=1, source_tokens=40).peak_bytes
    assert request_bytes(bart, "dynamic", {}, prompt_tokens=40, cached_tokens=5) == expected
    assert (
        request_bytes(llama, "none", {}, **facts) is None
        and request_bytes(llama, "dynamic", {}, **facts, dtype="x") is None
    )
    assert requested_length("static", {"max_cache_len": 4}, 8) == 8  # generate's minimum


@pytest.mark.parametrize("kind,given", [("dynamic", {}), ("static", {}), ("static", {"max_cache_len": 9_000})])
def test_the_most_that_fits_is_the_boundary(kind, given):
    llama = model_facts(tiny_config("tiny-llama"))
    facts = {"prompt_tokens": 6, "cached_tokens": 5_000}
    budget = 1 << 20
    n = most_length(llama, kind, given, budget=budget, **facts)
    at = {"prompt_tokens": 6}
    length = {"max_cache_len": n} if kind == "static" else {}
    assert request_bytes(llama, kind, {**given, **length}, cached_tokens=n, **at) <= budget
    bigger = {"max_cache_len": n + 1} if kind == "static" else {}
    assert request_bytes(llama, kind, {**given, **bigger}, cached_tokens=n + 1, **at) > budget
    assert n == budget // (3 * 2 * 2 * 16 * 4)
    assert most_length(llama, kind, given, budget=100, **facts) == 0  # not even the prompt fits
