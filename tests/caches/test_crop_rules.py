"""`kvlab.caches.crop_rules`: every rule about `cache.crop`, and the cache classes and the explorer calling it.

The rules take numbers; the caches read those numbers from their layers (through `kvlab._compat`) and refuse with
the rule's own message, and the Cache Explorer's crop goes through the same rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from kvlab import _compat, make_cache
from kvlab.caches import CacheCropError, crop_rules
from kvlab.explorer.models import ByteTokenizer, ModelStore
from kvlab.explorer.session import RunRequest, Session

WINDOW = 4


def message(rule, *args) -> str:
    with pytest.raises(CacheCropError) as err:
        rule(*args)
    return str(err.value)


# -- the rules, one by one --------------------------------------------------------------------------------------
def test_a_count_is_an_integral_scalar():
    assert crop_rules.crop_count(-3) == -3 and crop_rules.crop_count(np.int64(-3)) == -3
    assert crop_rules.crop_count(torch.tensor(-2)) == -2
    for value in (True, 0.5, "-1", None):
        with pytest.raises(CacheCropError, match="crop takes an integer count of tokens"):
            crop_rules.crop_count(value)


def test_the_explorer_removes_n_tokens_with_crop_minus_n():
    assert crop_rules.removal_count(3) == -3
    for n in (0, -2, 1.5, "2"):
        with pytest.raises(CacheCropError, match="crop removes the last n tokens: n must be a positive integer"):
            crop_rules.removal_count(n)


def test_counts_are_negative_and_stop_at_the_start():
    crop_rules.check_crop(0, 5)
    crop_rules.check_crop(-5, 5)
    crop_rules.check_crop(-50, None)  # linear-attention states only: transformers' own rules apply
    with pytest.raises(CacheCropError, match=r"crop\(2\): transformers .* crops by a negative count; use crop\(-n\)"):
        crop_rules.check_crop(2, 5)
    with pytest.raises(CacheCropError, match=r"crop\(-6\) goes past the start: .* crop\(0\) \.\. crop\(-5\)"):
        crop_rules.check_crop(-6, 5)


def test_a_dynamic_sliding_layer_needs_past_recording_once_its_window_is_full():
    crop_rules.check_dynamic_sliding(-1, 0, "sliding", 3, WINDOW, False)  # window not full yet
    crop_rules.check_dynamic_sliding(-1, 0, "sliding", 9, WINDOW, True)  # recording the past
    with pytest.raises(CacheCropError, match=r"chunked layer 2 has seen 4 tokens and keeps only the last 3"):
        crop_rules.check_dynamic_sliding(-1, 2, "chunked", 4, WINDOW, False)
    with pytest.raises(CacheCropError, match="activate_past_recording"):
        crop_rules.check_dynamic_sliding(0, 0, "sliding", 4, WINDOW, False)  # transformers refuses crop(0) too


def test_a_static_sliding_layer_cannot_be_cropped_once_wrapped():
    crop_rules.check_static_sliding(-1, 0, 4, WINDOW)  # filled, not wrapped
    crop_rules.check_static_sliding(0, 0, 9, WINDOW)  # removes nothing
    with pytest.raises(CacheCropError, match="sliding layer 1 has seen 5 tokens .* StaticCache cannot record"):
        crop_rules.check_static_sliding(-1, 1, 5, WINDOW)


def test_a_quantized_cache_crops_only_its_residual():
    crop_rules.check_quantized_residual(-2, "quanto", 2)
    crop_rules.check_quantized_residual(0, "fp8", 0)
    with pytest.raises(CacheCropError, match=r"QuantizedCache \(hqq\) holds only 2 tokens in its full-precision"):
        crop_rules.check_quantized_residual(-3, "hqq", 2)
    with pytest.raises(CacheCropError, match=r"\(fp8\) holds no full-precision residual"):
        crop_rules.check_quantized_residual(-1, "fp8", 0)


def test_recurrent_states_to_keep_is_a_count_where_layers_keep_them():
    for keep in (None, 0, 4):
        crop_rules.check_states_to_keep(keep, True)
    crop_rules.check_states_to_keep(None, False)  # plain activate_past_recording() on any release
    for keep in (-1, 1.5, True, "2"):
        with pytest.raises(CacheCropError, match=r"give a count of states, an integer >= 0"):
            crop_rules.check_states_to_keep(keep, True)
    with pytest.raises(CacheCropError, match=r"keep no recurrent states to roll back \(that came with transformers"):
        crop_rules.check_states_to_keep(2, False)


def test_a_linear_layer_rolls_back_while_recording_and_within_what_it_recorded():
    crop_rules.check_linear_rollback(-3, 0, True, 3)
    crop_rules.check_linear_rollback(0, 0, True, 0)
    crop_rules.check_linear_rollback(0, 0, True, None)  # crop(0) only trims the conv states
    with pytest.raises(CacheCropError, match=r"layer 2 does not record its past.*recurrent_states_to_keep=N"):
        crop_rules.check_linear_rollback(0, 2, False, 0)  # transformers refuses crop(0) too
    with pytest.raises(CacheCropError, match=r"at most 3 tokens back .* valid counts are crop\(0\) \.\. crop\(-3\)"):
        crop_rules.check_linear_rollback(-4, 0, True, 3)
    with pytest.raises(CacheCropError, match=r"valid counts are crop\(0\) only"):
        crop_rules.check_linear_rollback(-1, 0, True, 0)
    with pytest.raises(CacheCropError, match=r"cannot restore an earlier recurrent state .* only crop\(0\) is valid"):
        crop_rules.check_linear_rollback(-1, 0, True, None)


# -- the caches and the explorer call them ------------------------------------------------------------------------
@pytest.fixture
def config(sliding_config):
    return sliding_config  # layer 0 sliding (window 4), layer 1 full attention (tests/conftest.py)


def fill(cache, n: int):
    states = torch.arange(n, dtype=torch.float32).view(1, 1, -1, 1)  # (batch, kv_heads, n, head_dim)
    for layer in (0, 1):
        cache.update(states, states, layer)
    return cache


def test_each_cache_refuses_with_its_rule_s_message(config):
    dynamic = fill(make_cache("dynamic", config), 5)
    seen, window, records = _compat.dynamic_sliding_state(dynamic.layers[0])
    for count in (-1, 0):
        expected = message(crop_rules.check_dynamic_sliding, count, 0, "sliding", seen, window, records)
        assert message(dynamic.crop, count) == expected
    static = fill(make_cache("static", config, max_cache_len=8), 5)
    expected = message(crop_rules.check_static_sliding, -1, 0, *_compat.static_sliding_state(static.layers[0]))
    assert message(static.crop, -1) == expected
    for cache in (dynamic, static):
        assert message(cache.crop, 1) == message(crop_rules.check_crop, 1, 5)
        assert message(cache.crop, 0.5) == message(crop_rules.crop_count, 0.5)
        assert not cache.trace.crops  # refused before any layer changed


def test_a_quantized_cache_refuses_with_the_residual_rule():
    llama = transformers.LlamaConfig(
        num_hidden_layers=2, num_key_value_heads=1, num_attention_heads=1, hidden_size=8, head_dim=8, vocab_size=16
    )
    cache = make_cache("quantized", llama, backend="hqq", nbits=8, residual_length=4, axis_key=1, axis_value=1)
    states = torch.zeros(1, 1, 6, 8)  # (batch, kv_heads, seq, head_dim): the prefill is quantized whole
    for layer in (0, 1):
        cache.update(states, states, layer)
    residual = _compat.quantized_residual_length(cache.layers[0])
    assert message(cache.crop, -1) == message(crop_rules.check_quantized_residual, -1, "hqq", residual)


def test_the_explorer_crops_through_the_same_rules(tiny):
    session = Session(ModelStore(tiny("tiny-gemma3"), ByteTokenizer()))
    request = RunRequest("loaded", prompt="The KV cache keeps keys.", max_new_tokens=3)
    done, errors = [], []
    session.start(request, on_done=done.append, on_error=lambda run, msg: errors.append(msg))
    assert session.wait(60) and errors == [] and done
    assert message(session.crop, 0) == message(crop_rules.removal_count, 0)
    cache = session.current.result.cache_object
    seen, window, records = _compat.dynamic_sliding_state(cache.layers[0])
    assert message(session.crop, 2) == message(
        crop_rules.check_dynamic_sliding, -2, 0, "sliding", seen, window, records
    )
