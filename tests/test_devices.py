"""kvlab.devices: logging every forward input of a generate call."""

import pytest

import kvlab
from kvlab.devices import log_forward_inputs


def test_every_forward_is_logged_with_device_dtype_and_shape(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    with log_forward_inputs(model) as log:
        kvlab.run(model, None, ids, max_new_tokens=4)
    assert log.calls == 4  # prefill + 3 decoding forwards (the 4th token needs no forward)
    inputs = log.of("input_ids")
    assert [r.shape for r in inputs] == [(1, 6), (1, 1), (1, 1), (1, 1)]
    assert {r.dtype for r in inputs} == {"int64"}
    assert log.devices()["input_ids"] == [str(ids.device)]
    keys = log.of("cache.layers[0].keys")
    assert [r.shape[-2] for r in keys] == [6, 7, 8]


def test_static_cache_gives_one_decoding_signature(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    with log_forward_inputs(model) as dynamic:
        kvlab.run(model, None, ids, max_new_tokens=5)
    with log_forward_inputs(model) as static:
        kvlab.run(model, None, ids, cache="static", max_cache_len=16, max_new_tokens=5)
    assert len(set(dynamic.signatures()[1:])) == 4
    assert len(set(static.signatures()[1:])) == 1


def test_hook_is_removed_even_when_the_block_raises(tiny):
    model = tiny("tiny-llama")
    before = len(model._forward_pre_hooks)
    with pytest.raises(KeyError):
        with log_forward_inputs(model):
            assert len(model._forward_pre_hooks) == before + 1
            raise KeyError("boom")
    assert len(model._forward_pre_hooks) == before
