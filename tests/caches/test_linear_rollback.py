"""A hybrid cache rolled back (transformers 5.25): `activate_past_recording(recurrent_states_to_keep=N)` passes
through kvlab's caches, `crop(-n)` restores each linear-attention layer's recurrent state exactly where transformers
can, and kvlab refuses first where transformers would fail or restore a wrong state. The model is a tiny random
Qwen3-Next (three Gated DeltaNet layers, then one full-attention layer)."""

from __future__ import annotations

import pytest
import torch

from kvlab import _compat, make_cache
from kvlab.caches import CacheCropError, crop_rules
from kvlab.measure.linear_rollback import recorded_bytes
from kvlab.recording.storage import storage_bytes

HYBRID = "qwen3_next"
PROMPT = 8
# Read from the layer class, as kvlab reads it: before 5.25 a linear-attention layer records no recurrent states.
ROLLS_BACK = _compat.keeps_recurrent_states(_compat.LinearAttentionLayer)
rolls_back = pytest.mark.skipif(
    not ROLLS_BACK, reason=f"linear-attention rollback came with transformers {_compat.ROLLBACK_RELEASE}"
)


def message(call, *args, **kwargs) -> str:
    with pytest.raises(CacheCropError) as err:
        call(*args, **kwargs)
    return str(err.value)


@pytest.fixture
def hybrid(tiny):
    return tiny(HYBRID)


def linear_layers(cache) -> list[int]:
    return [i for i, layer in enumerate(cache.layers) if _compat.is_linear_state_layer(layer)]


def greedy_with_states(model, input_ids, cache, new_tokens: int, layer_idx: int):
    """Greedy decoding into `cache`, one token per forward after the prompt (as `generate` decodes): the new tokens,
    and a copy of layer `layer_idx`'s recurrent state after each length fed, {tokens fed: state}: the witnesses of
    what a crop must put back, kept outside the cache."""
    ids, fed, tokens, states = input_ids, 0, [], {}  # ids: (1, prompt tokens), then (1, 1)
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = model(ids, use_cache=True, **{_compat.cache_kwarg(model): cache}).logits  # (1, fed now, vocab)
            fed += ids.shape[-1]
            states[fed] = cache.layers[layer_idx].recurrent_states[0].clone()
            ids = logits[:, -1:].argmax(-1)
            tokens.append(int(ids))
    return tokens, states


def recorded_run(model, ids, keep: int, new_tokens: int):
    cache = make_cache("dynamic", model.config)
    cache.activate_past_recording(recurrent_states_to_keep=keep)
    tokens, states = greedy_with_states(model, ids, cache, new_tokens, layer_idx=linear_layers(cache)[0])
    return cache, tokens, states


def stopped_run(model, ids, tokens: list[int], keep: int, fed: int):
    """The same forwards as `recorded_run` (the prompt, then one token each), stopped after `fed` tokens."""
    cache = make_cache("dynamic", model.config)
    cache.activate_past_recording(recurrent_states_to_keep=keep)
    key = _compat.cache_kwarg(model)
    with torch.inference_mode():
        model(ids, use_cache=True, **{key: cache})
        for token in tokens[: fed - ids.shape[-1]]:
            model(torch.tensor([[token]]), use_cache=True, **{key: cache})
    return cache


@rolls_back
def test_the_option_reaches_every_linear_layer(hybrid):
    cache = make_cache("dynamic", hybrid.config)
    assert linear_layers(cache) == [0, 1, 2]  # the tiny Qwen3-Next: three linear-attention layers, one full
    cache.activate_past_recording(recurrent_states_to_keep=3)
    assert [cache.layers[i].recurrent_states_to_keep for i in linear_layers(cache)] == [3, 3, 3]
    assert cache.get_recurrent_states_to_keep() == 3 and cache.is_croppable
    assert "past_recording_from_step" in cache.trace.meta


@pytest.mark.parametrize("keep", [-1, 1.5, True, "2"])
def test_a_bad_count_is_refused_before_any_layer_records(hybrid, keep):
    cache = make_cache("dynamic", hybrid.config)
    assert message(cache.activate_past_recording, recurrent_states_to_keep=keep) == message(
        crop_rules.check_states_to_keep, keep, ROLLS_BACK
    )
    assert not any(cache.is_recording_past(i) for i in range(len(cache.layers)))


@rolls_back
def test_crop_restores_the_recurrent_state_of_n_tokens_earlier_bit_for_bit(hybrid, prompt_ids):
    ids = prompt_ids(PROMPT)
    cache, tokens, states = recorded_run(hybrid, ids, keep=PROMPT, new_tokens=6)
    fed = PROMPT + 5  # the 6th token is never fed back
    cache.crop(-3)
    assert cache.get_seq_length() == fed - 3
    assert torch.equal(cache.layers[0].recurrent_states[0], states[fed - 3])
    stopped = stopped_run(hybrid, ids, tokens, PROMPT, fed - 3)
    for i in linear_layers(cache):
        assert torch.equal(cache.layers[i].recurrent_states[0], stopped.layers[i].recurrent_states[0])
        assert torch.equal(cache.layers[i].conv_states[0], stopped.layers[i].conv_states[0][..., -4:])
        assert _compat.linear_tokens_seen(cache.layers[i]) == fed - 3


@rolls_back
def test_tokens_after_a_crop_and_regenerate_equal_a_fresh_run(hybrid, prompt_ids, greedy):
    ids = prompt_ids(PROMPT)
    fresh = greedy(hybrid, ids, new_tokens=9)[0, PROMPT:].tolist()
    cache, tokens, _ = recorded_run(hybrid, ids, keep=PROMPT, new_tokens=6)
    assert tokens == fresh[:6]
    cache.crop(-3)  # the cache now holds the prompt and the first 2 new tokens
    again, _ = greedy_with_states(hybrid, torch.tensor([[tokens[2]]]), cache, 6, layer_idx=0)
    assert tokens[:3] + again == fresh


def test_a_hybrid_cache_without_recording_is_refused_before_any_layer_changes(hybrid, prompt_ids):
    cache = make_cache("dynamic", hybrid.config)
    greedy_with_states(hybrid, prompt_ids(PROMPT), cache, 3, layer_idx=0)
    counts = [_compat.linear_tokens_seen(cache.layers[i]) for i in linear_layers(cache)]
    for n in (-1, 0):  # transformers refuses crop(0) too, from inside its layer loop
        assert message(cache.crop, n) == message(crop_rules.check_linear_rollback, n, 0, False, 0)
    assert "activate_past_recording(recurrent_states_to_keep=N)" in message(cache.crop, -1)
    assert [_compat.linear_tokens_seen(cache.layers[i]) for i in linear_layers(cache)] == counts
    assert cache.get_seq_length() == PROMPT + 2 and not cache.trace.crops


@rolls_back
def test_a_prompt_longer_than_n_leaves_one_state_short_and_kvlab_stops_there(hybrid, prompt_ids):
    """The prompt (8 tokens) is longer than N (2): the history holds the state from before the prompt, then the
    last N-1 of it, then one per decoded token. Its oldest entry is not the state from that many tokens back:
    transformers restores it silently; kvlab allows one token less."""
    ids = prompt_ids(PROMPT)
    cache, tokens, states = recorded_run(hybrid, ids, keep=2, new_tokens=4)  # fed: 8 + 3
    history = len(cache.layers[0].recurrent_states_history[0])
    assert history == 2 + 3 and _compat.restorable_tokens(cache.layers[0]) == history - 1
    plain = stopped_run(hybrid, ids, tokens, 2, PROMPT + 3)
    _compat.DynamicCache.crop(plain, -history)  # transformers' own crop, past kvlab's rules: back to 6 tokens...
    assert not plain.layers[0].recurrent_states[0].any()  # ...with the state from before the prompt (all zeros)
    six = make_cache("dynamic", hybrid.config)
    greedy_with_states(hybrid, ids[:, : PROMPT + 3 - history], six, 1, layer_idx=0)
    assert six.layers[0].recurrent_states[0].abs().max() > 1e-3  # where the state after 6 tokens is not
    refused = message(cache.crop, -history)
    assert refused == message(crop_rules.check_linear_rollback, -history, 0, True, history - 1)
    cache.crop(-(history - 1))  # back to 7 tokens: the prompt's last state kept, computed one token at a time
    seven = make_cache("dynamic", hybrid.config)
    greedy_with_states(hybrid, ids[:, : PROMPT - 1], seven, 1, layer_idx=0)  # computed by chunks: rounding apart
    difference = cache.layers[0].recurrent_states[0] - seven.layers[0].recurrent_states[0]
    assert difference.abs().max() < 1e-5


@rolls_back
def test_after_a_crop_only_the_tokens_fed_since_roll_back(hybrid, prompt_ids):
    cache, _, _ = recorded_run(hybrid, prompt_ids(PROMPT), keep=PROMPT, new_tokens=4)
    cache.crop(-1)
    assert message(cache.crop, -1) == message(crop_rules.check_linear_rollback, -1, 0, True, 0)
    cache.crop(0)  # still valid: it trims nothing more


@rolls_back
def test_the_crop_event_counts_the_states_restored_and_the_trace_their_bytes(hybrid, prompt_ids):
    cache, _, _ = recorded_run(hybrid, prompt_ids(PROMPT), keep=PROMPT, new_tokens=5)
    layer = cache.layers[0]
    held = cache.trace.final_layers()[0]["bytes_held"]
    kept = recorded_bytes(cache)
    assert kept == 3 * storage_bytes(*_compat.recorded_states(layer)) > 0  # 3 layers alike
    current = storage_bytes(layer.conv_states[0], layer.recurrent_states[0])
    assert held == current + kept // 3  # the trace counts the recorded states as held, beside the current ones
    cache.crop(-2)
    crop = cache.trace.crops[-1]
    assert crop["recurrent_states_restored"] == len(linear_layers(cache)) == 3
    assert crop["lengths_before"] == [PROMPT + 4] * 4 and crop["lengths_after"] == [PROMPT + 2] * 4
    assert recorded_bytes(cache) == 0  # the crop empties the history
    assert cache.trace.final_layers()[0]["bytes_held"] < held
    cache.crop(0)
    assert cache.trace.crops[-1]["recurrent_states_restored"] == 0


class _LayerWithoutRollback(_compat.LinearAttentionLayer):
    """A linear-attention layer as transformers 5.24 ships it: recording keeps the conv inputs only."""

    def activate_past_recording(self):
        self.record_past = True

    def update_recurrent_state(self, recurrent_states, state_idx: int = 0, **kwargs):
        if not self.is_recurrent_states_initialized[state_idx]:
            self.lazy_initialization(recurrent_states=recurrent_states, state_idx=state_idx)
        self.recurrent_states[state_idx].copy_(recurrent_states)  # the newest state only, none recorded
        return self.recurrent_states[state_idx]


def test_a_layer_that_cannot_roll_back_allows_crop_0_only(hybrid, prompt_ids):
    cache = make_cache("dynamic", hybrid.config)
    for i in linear_layers(cache):
        cache.layers[i].__class__ = _LayerWithoutRollback
    refused = message(cache.activate_past_recording, recurrent_states_to_keep=2)
    assert refused == message(crop_rules.check_states_to_keep, 2, False)
    assert f"came with transformers {_compat.ROLLBACK_RELEASE}" in refused
    cache.activate_past_recording()
    greedy_with_states(hybrid, prompt_ids(PROMPT), cache, 1, layer_idx=0)  # the prompt only: no state to keep
    assert message(cache.crop, -1) == message(crop_rules.check_linear_rollback, -1, 0, True, None)
