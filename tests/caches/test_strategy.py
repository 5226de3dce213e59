"""A strategy (a user's `DynamicLayer` subclass) in transformers' own `Cache`: `kvlab.watch` adopts it and reads
its slots without the user writing any instrumentation, tokens unchanged; `make_cache` builds it and names what a
bad strategy got wrong (`StrategyError`), while the same bug under the watch reaches the user unchanged."""

from __future__ import annotations

import pytest
import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer

import kvlab
from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.caches.strategy import CheckedStrategyCache
from kvlab.recording.storage import storage_bytes
from kvlab.strategies.load import StrategyError

FIRST, LAST, PROMPT, NEW = 2, 4, 10, 5


class KeepEnds(DynamicLayer):
    """The README's strategy: attend to all it holds and the new tokens, then keep the first and the last ones."""

    def __init__(self, first: int = FIRST, last: int = LAST):
        super().__init__()
        self.first, self.last = first, last
        self.bytes_after_update: list[int] = []  # the test's own record: the storage it holds after each update

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys = torch.cat([self.keys, key_states], dim=-2)  # (batch, kv_heads, seq, head_dim)
        values = torch.cat([self.values, value_states], dim=-2)
        self.keys, self.values = keys, values
        if keys.shape[-2] > self.first + self.last:
            self.keys = torch.cat([keys[..., : self.first, :], keys[..., -self.last :, :]], dim=-2)
            self.values = torch.cat([values[..., : self.first, :], values[..., -self.last :, :]], dim=-2)
        self.bytes_after_update.append(storage_bytes(self.keys, self.values))
        return keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0


class AttendRecent(DynamicLayer):
    """Stores every token but lets a query attend only to the last `window` of them: the rest is masked."""

    window = 3

    def update(self, key_states, value_states, *args, **kwargs):
        super().update(key_states, value_states)
        visible = self.window + key_states.shape[-2]
        return self.keys[..., -visible:, :], self.values[..., -visible:, :]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        held = self.get_seq_length()
        return min(held, self.window) + query_length, max(held - self.window, 0)


def plain_and_watched(model, ids, greedy, make_cache_object):
    """(plain tokens, watched tokens, the watched cache, its trace)."""
    plain = greedy(model, ids, make_cache_object(), NEW)
    cache = make_cache_object()
    with kvlab.watch(model) as watch:
        watched = greedy(model, ids, cache, NEW)
    return plain, watched, cache, watch.trace


def test_a_cache_of_a_users_layer_is_watched_with_its_slots_exact_at_every_step(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-llama"), prompt_ids(PROMPT)
    plain, watched, cache, trace = plain_and_watched(
        model, ids, greedy, lambda: Cache(layer_class_to_replicate=KeepEnds)
    )
    assert torch.equal(plain, watched)
    assert type(cache) is Cache and trace.meta["cache_kind"] == "KeepEnds" and trace.meta["cache_class"] == "Cache"
    heads = model.config.num_attention_heads
    for layer_idx, layer in enumerate(cache.layers):
        events = [e for e in trace.updates if e["layer_idx"] == layer_idx]
        assert len(events) == NEW  # the prefill, then a forward per new token but the last
        assert [e["bytes_held"] for e in events] == layer.bytes_after_update  # the storage, at every step
        head_dim, stored_before, evicted_before = layer.keys.shape[-1], 0, 0
        for step, event in enumerate(events):
            seen = PROMPT + step
            stored = min(seen, FIRST + LAST)
            queries = PROMPT if step == 0 else 1
            assert (event["step"], event["logical_length"], event["slots_allocated"]) == (step, seen, stored)
            assert (event["slots_live"], event["slots_masked"], event["tokens_evicted"]) == (stored, 0, seen - stored)
            assert event["tokens_evicted_now"] == seen - stored - evicted_before
            slots = stored_before + queries  # what this update handed attention: all it held, and the new tokens
            assert (event["queries"], event["slots_attended"]) == (queries, slots)
            assert event["attention_flops"] == 2 * heads * queries * slots * 2 * head_dim
            stored_before, evicted_before = stored, seen - stored
        assert not [name for name in vars(layer) if "kvlab" in name]  # the watch took its count back


def test_masked_slots_come_from_the_layers_own_mask_sizes(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-llama"), prompt_ids(PROMPT)
    plain, watched, cache, trace = plain_and_watched(
        model, ids, greedy, lambda: Cache(layer_class_to_replicate=AttendRecent)
    )
    assert torch.equal(plain, watched)
    last = trace.updates[-1]
    stored = PROMPT + NEW - 1
    window = AttendRecent.window
    assert (last["slots_allocated"], last["slots_live"], last["slots_masked"]) == (stored, window, stored - window)
    assert last["tokens_evicted"] == 0 and last["slots_attended"] == window + 1


def test_a_cache_built_from_a_list_of_layers_and_a_user_layer_in_a_dynamic_cache_are_read_alike(
    tiny, prompt_ids, greedy, capsys
):
    model, ids = tiny("tiny-llama"), prompt_ids(PROMPT)
    layers = model.config.num_hidden_layers

    def in_dynamic():
        cache = DynamicCache(config=model.config)
        cache.layers = [KeepEnds() for _ in range(layers)]
        return cache

    reference = plain_and_watched(model, ids, greedy, lambda: Cache(layer_class_to_replicate=KeepEnds))
    for make in (lambda: Cache(layers=[KeepEnds() for _ in range(layers)]), in_dynamic):
        plain, watched, _cache, trace = plain_and_watched(model, ids, greedy, make)
        assert torch.equal(plain, watched) and torch.equal(watched, reference[1])
        assert trace.layer_table() == reference[3].layer_table()
    assert "no slot reading" not in capsys.readouterr().err


def test_a_cache_kvlab_cannot_switch_is_left_unwatched_in_one_line(tiny, prompt_ids, greedy, capsys):
    class Sealed(Cache):
        def __init_subclass__(cls, **kwargs):
            raise TypeError("Sealed takes no subclass")

    model, ids = tiny("tiny-llama"), prompt_ids(PROMPT)
    plain = greedy(model, ids, Sealed(layer_class_to_replicate=KeepEnds), NEW)
    capsys.readouterr()
    with kvlab.watch(model) as watch:
        watched = greedy(model, ids, Sealed(layer_class_to_replicate=KeepEnds), NEW)
    assert torch.equal(plain, watched) and watch.traces == []
    lines = [line for line in capsys.readouterr().err.splitlines() if "does not record this cache" in line]
    assert lines == [
        "kvlab: kvlab.watch does not record this cache: kvlab cannot instrument a Sealed: Sealed takes no subclass"
    ]


def test_make_cache_builds_a_strategy_with_its_options_and_kvlab_run_takes_it(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-llama"), prompt_ids(PROMPT)
    cache = make_cache(KeepEnds, model.config, first=1, last=3)
    assert isinstance(cache, CheckedStrategyCache) and cache.trace.meta["strategy"]["options"] == {
        "first": 1,
        "last": 3,
    }
    built = greedy(model, ids, cache, NEW)
    plain = greedy(model, ids, Cache(layer_class_to_replicate=lambda: KeepEnds(1, 3)), NEW)
    assert torch.equal(built, plain)
    assert {e["slots_allocated"] for e in cache.trace.updates} == {4}
    result = kvlab.run(model, None, ids, cache=KeepEnds, max_new_tokens=NEW, first=1, last=3)
    assert result.cache == result.trace.meta["cache_kind"] == "KeepEnds"
    assert result.generated_token_ids == built[0, PROMPT:].tolist()


def test_crop_and_reset_keep_the_count_of_tokens_seen_exact(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-llama"), prompt_ids(PROMPT)
    cache = make_cache(KeepEnds, model.config)
    greedy(model, ids, cache, NEW)
    seen = PROMPT + NEW - 1
    cache.crop(-2)
    after = cache.trace.events[-1]
    assert after["op"] == "crop" and (after["logical_length"], after["slots_allocated"]) == (seen - 2, 4)
    assert after["tokens_evicted"] == seen - FIRST - LAST  # cropped tokens are not evicted ones
    cache.reset()
    assert cache.trace.events[-1]["op"] == "reset" and cache.trace.events[-1]["bytes_held"] == 0
    greedy(model, ids, cache, 2)
    assert cache.trace.updates[-1]["logical_length"] == PROMPT + 1


class Raises(KeepEnds):
    def update(self, key_states, value_states, *args, **kwargs):
        if self.is_initialized:
            raise RuntimeError("my bug")
        return super().update(key_states, value_states)


class WrongDtype(KeepEnds):
    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = super().update(key_states, value_states)
        return keys.double(), values.double()


class TooFewSlots(KeepEnds):
    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = super().update(key_states, value_states)
        return keys[..., 1:, :], values[..., 1:, :]


class KeysInAList(KeepEnds):
    def update(self, key_states, value_states, *args, **kwargs):
        out = super().update(key_states, value_states)
        self.keys = [self.keys]
        return out

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys[0].shape[-2] + query_length if isinstance(self.keys, list) else query_length, 0


BAD = [  # (layer class, kvlab's one line)
    (Raises, "Raises.update raised RuntimeError: my bug"),
    (WrongDtype, "WrongDtype.update returned keys of (1, 2, 10, 16) float64 on cpu for new states of"),
    (TooFewSlots, "TooFewSlots.update returned 9 key and 9 value slots, but its get_mask_sizes told the attention"),
    (KeysInAList, "KeysInAList keeps a list of 1 in self.keys after update; kvlab reads a strategy's slots from"),
]


def outcome(run) -> tuple:
    """("tokens", the tokens) or ("raised", its type, its message): what plain and watched code must share."""
    try:
        return ("tokens", run().tolist())
    except Exception as err:
        return ("raised", type(err), str(err))


@pytest.mark.parametrize(("layer_class", "message"), BAD, ids=[b[0].__name__ for b in BAD])
def test_a_bad_strategy_is_named_in_one_line_and_leaves_the_model_as_it_was(
    tiny, prompt_ids, greedy, layer_class, message
):
    model, ids = tiny("tiny-llama"), prompt_ids(PROMPT)
    before = greedy(model, ids, None, NEW)
    with pytest.raises(StrategyError) as refused:
        kvlab.run(model, None, ids, cache=layer_class, max_new_tokens=NEW)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    plain = outcome(lambda: greedy(model, ids, Cache(layer_class_to_replicate=layer_class), NEW))
    with kvlab.watch(model):  # the watch changes nothing: the user's own error, or the same tokens
        watched = outcome(lambda: greedy(model, ids, Cache(layer_class_to_replicate=layer_class), NEW))
    assert watched == plain
    assert torch.equal(greedy(model, ids, None, NEW), before)


def test_a_strategy_replaces_attention_layers_only(tiny):
    with pytest.raises(StrategyError, match="KeepEnds replaces attention layers, and this model keeps linear"):
        make_cache(KeepEnds, tiny("tiny-mamba").config)


def test_an_encoder_decoder_model_gets_the_strategy_for_its_self_attention(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-bart"), prompt_ids(7)
    cache = make_cache(KeepEnds, model.config)
    greedy(model, ids, cache, NEW)
    self_events = [e for e in cache.trace.updates if e["role"] == "self"]
    assert self_events[-1]["slots_allocated"] == min(NEW, FIRST + LAST)
    assert isinstance(cache, _compat.EncoderDecoderCache)


@pytest.mark.real_model
def test_smollm2_watched_with_a_strategy_holds_exactly_what_its_layers_keep(smollm2):
    model, tokenizer = smollm2
    inputs = tokenizer("The KV cache keeps the keys and values of every token", return_tensors="pt")  # 12 tokens

    def generate():
        cache = Cache(layer_class_to_replicate=lambda: KeepEnds(first=4, last=7))
        return model.generate(**inputs, do_sample=False, max_new_tokens=8, past_key_values=cache), cache

    plain, _ = generate()
    with kvlab.watch(model) as watch:
        watched, cache = generate()
    assert torch.equal(plain, watched)
    summary, heads, dim = watch.trace.summary(), model.config.num_key_value_heads, model.config.head_dim
    assert summary["final_bytes"] == 30 * 11 * 2 * heads * dim * 4 == 506_880  # 11 kept tokens x 30 layers
    assert summary["tokens_evicted"] == 30 * (12 + 7 - 11)  # 19 tokens seen per layer, 11 kept
    assert [e["bytes_held"] for e in watch.trace.updates if e["layer_idx"] == 0] == cache.layers[0].bytes_after_update
