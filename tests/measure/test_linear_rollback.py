"""kvlab.measure.linear_rollback: a restored state against a stopped run's, and the bytes a recording costs, on a
tiny random Qwen3-Next (three linear-attention layers, one full-attention layer)."""

import pytest
import torch

from kvlab import _compat, make_cache
from kvlab.measure.linear_rollback import bytes_around_last_crop, recorded_bytes, state_match


def test_state_match_is_exact_equality_and_the_largest_difference():
    a = torch.zeros(2, 3)
    assert state_match(a, a.clone()).equal and state_match(a, a.clone()).max_abs_difference == 0.0
    b = a.clone()
    b[1, 2] = -0.25
    match = state_match(a, b)
    assert not match.equal and match.max_abs_difference == 0.25


@pytest.mark.skipif(
    not _compat.keeps_recurrent_states(_compat.LinearAttentionLayer),
    reason=f"linear-attention rollback came with transformers {_compat.ROLLBACK_RELEASE}",
)
def test_recorded_bytes_and_the_trace_around_a_crop(tiny, prompt_ids, greedy):
    model = tiny("qwen3_next")
    cache = make_cache("dynamic", model.config)
    cache.activate_past_recording(recurrent_states_to_keep=6)
    greedy(model, prompt_ids(6), cache, new_tokens=4)  # 9 tokens fed: 9 states kept per linear-attention layer
    one_state = cache.layers[0].recurrent_states[0]
    linear = sum(_compat.is_linear_state_layer(layer) for layer in cache.layers)
    kept = recorded_bytes(cache)
    assert kept == linear * 9 * one_state.numel() * one_state.element_size() > 0
    cache.crop(-2)
    before, after = bytes_around_last_crop(cache.trace)
    assert before - after >= kept  # the crop empties the history (and trims the conv inputs kept)
    assert recorded_bytes(cache) == 0
