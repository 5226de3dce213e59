"""kvlab.measure.devices: logging every forward input of a generate call."""

import pytest
import torch

import kvlab
from kvlab.measure.devices import log_forward_inputs


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


def test_decoding_signatures_leave_the_prefill_out(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    with log_forward_inputs(model) as static:
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=5,
            cache_implementation="static",
        )
    assert static.decoding_signatures() == (1, 4)
    assert static.distinct_signatures() == 2


def test_lengths_per_call_fill_missing_inputs_with_zero():
    from kvlab.measure.devices import ForwardInput, ForwardLog

    log = ForwardLog(
        [
            ForwardInput(0, "input_ids", "cpu", "int64", (1, 5)),
            ForwardInput(1, "input_ids", "cpu", "int64", (1, 1)),
            ForwardInput(2, "input_ids", "cpu", "int64", (1, 1)),
            ForwardInput(2, "cache.layers[0].keys", "cpu", "float32", (1, 2, 1, 8)),
        ]
    )
    assert log.lengths("cache.layers[0].keys") == [0, 1]
    assert log.lengths("input_ids", first_call=0) == [5, 1, 1]
