"""`kvlab.caches.base.InstrumentedCacheMixin`, what every instrumented cache shares: it must sit before a
transformers Cache, reads the layer kinds and query heads from the config it is given (or the layers themselves),
records every update, and closes transformers' drop-in gaps: crop takes any integral scalar, the trace stays exact
after reset / reorder / batch select / batch repeat, and instrumented caches (offloaded ones too) deep-copy.

Before: crop(torch.tensor(-3)) and crop(np.int64(-3)) were refused; after cache.reset() the trace still reported
the bytes from before; copy.deepcopy of an offloaded cache failed ("cannot pickle 'torch.Stream'")."""

from __future__ import annotations

import copy
import gc
import weakref

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab import _compat
from kvlab.caches import CacheCropError, InstrumentedDynamicCache
from kvlab.caches.base import InstrumentedCacheMixin, bound_argument
from kvlab.models.tiny import tiny_config

from .variants import variants

# One variant of each cache kind, the quantized one with a group size the hand count below can use.
EACH_KIND = ("dynamic", "static", "offloaded", "offloaded_static", "q-quanto-int4-g16")


def by_hand(cache, nbits: int = 0, q_group_size: int = 0) -> int:
    """The bytes a cache's layers hold, from tensor shapes alone (not kvlab's storage counter, which the trace
    uses): numel x element size of every plain key and value tensor, and for a quanto-packed one `nbits` / 8
    bytes per element plus a scale and a shift (in the keys' dtype) per `q_group_size` elements. Right for these
    tiny-llama caches, whose key and value tensors are never views into a larger storage."""
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values", "_quantized_keys", "_quantized_values"):
            tensor = getattr(layer, name, None)
            if tensor is None:
                continue
            if type(tensor) is torch.Tensor:
                total += tensor.numel() * tensor.element_size()
            else:  # packed: the shape is the logical one, the dtype the one it dequantizes to
                total += tensor.numel() * nbits // 8 + tensor.numel() // q_group_size * 2 * tensor.element_size()
    return total


def kv_formula(config, tokens: int, batch: int = 1, dtype_bytes: int = 4) -> int:
    """layers x kv heads x head dim x tokens x batch x 2 (keys and values) x bytes per element."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * config.num_key_value_heads * head_dim * tokens * batch * 2 * dtype_bytes


def prefilled(model, kind, options, ids):
    cache = kvlab.make_cache(kind, model.config, **options)
    with torch.inference_mode():
        model(ids, **{_compat.CACHE_KWARG: cache})
    return cache


@pytest.mark.parametrize(
    "count", [torch.tensor(-3), np.int64(-3), np.int32(-3), -3], ids=["torch", "np64", "np32", "int"]
)
def test_crop_takes_any_integral_scalar(tiny, prompt_ids, count):
    model = tiny("tiny-llama")
    ours = prefilled(model, "dynamic", {}, prompt_ids(10))
    theirs = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(prompt_ids(10), **{_compat.CACHE_KWARG: theirs})
    ours.crop(count)
    theirs.crop(-3)
    assert ours.get_seq_length() == theirs.get_seq_length() == 7
    assert ours.trace.crops[-1]["n"] == -3 and isinstance(ours.trace.crops[-1]["n"], int)
    # a crop keeps a view of the 10-token tensors: their storage is still held, and the trace says so
    assert ours.trace.summary()["final_bytes"] == kv_formula(model.config, tokens=10)
    assert by_hand(theirs) == kv_formula(model.config, tokens=7)  # what the views show, for contrast


@pytest.mark.parametrize(
    "count",
    [torch.tensor(-1.5), -1.5, True, "3", torch.tensor([-1, -2])],
    ids=["float-tensor", "float", "bool", "str", "1-d"],
)
def test_crop_refuses_what_is_not_a_count_in_one_line(tiny, prompt_ids, count):
    cache = prefilled(tiny("tiny-llama"), "dynamic", {}, prompt_ids(6))
    with pytest.raises(CacheCropError, match="crop takes an integer count of tokens") as err:
        cache.crop(count)
    assert "\n" not in str(err.value) and cache.get_seq_length() == 6


@pytest.mark.parametrize("variant", variants(*EACH_KIND))
def test_the_trace_stays_exact_after_reset_reorder_select_and_repeat(tiny, prompt_ids, variant):
    model = tiny("tiny-llama")
    kind, options = variant.kind, variant.options
    cache = prefilled(model, kind, options, prompt_ids(8, batch=2))

    nbits, group = options.get("nbits", 0), options.get("q_group_size", 0)

    def exact():
        assert (
            cache.trace.summary()["final_bytes"] == cache.kvlab_recorder.total_bytes() == by_hand(cache, nbits, group)
        )

    exact()
    if kind != "quantized":  # the hand count itself, against the formula: 8 tokens, or every static slot, x 2 rows
        tokens = options["max_cache_len"] if "static" in kind else 8
        assert by_hand(cache) == kv_formula(model.config, tokens=tokens, batch=2)
    cache.reorder_cache(torch.tensor([1, 0]))
    exact()
    if kind in ("dynamic", "offloaded"):  # only DynamicLayer has batch select / repeat in transformers
        cache.batch_repeat_interleave(2)
        exact()
        assert cache.layers[0].keys.shape[0] == 4
        cache.batch_select_indices(torch.tensor([0, 3]))
        exact()
    before = cache.trace.summary()["final_bytes"]
    cache.reset()
    exact()
    if kind in ("dynamic", "offloaded", "quantized"):  # dropped, not zeroed: the trace must say so
        assert cache.trace.summary()["final_bytes"] < before


@pytest.mark.parametrize("variant", variants(*EACH_KIND, where=lambda variant: variant.kind != "quantized"))
def test_deep_copy_is_independent_with_its_own_trace(tiny, prompt_ids, greedy, variant):
    model = tiny("tiny-gemma3")
    ids = prompt_ids(6)
    cache = prefilled(model, variant.kind, variant.options, ids)
    events, prefix_bytes = list(cache.trace.events), cache.trace.summary()["final_bytes"]
    copied = copy.deepcopy(cache)
    assert type(copied) is type(cache) and copied.trace is not cache.trace and copied.trace.events == events
    if getattr(cache, "offloading", False):
        assert copied.prefetch_stream is not cache.prefetch_stream
    full = torch.cat([ids, prompt_ids(3, seed=1)], dim=1)
    reference = variant.reference(model.config)
    with torch.inference_mode():
        model(ids, **{_compat.CACHE_KWARG: reference})
    ours = greedy(model, full, copied, 4, logits=True)
    theirs = greedy(model, full, copy.deepcopy(reference), 4, logits=True)
    assert torch.equal(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], theirs[1], rtol=0, atol=0)
    assert cache.trace.events == events and cache.trace.summary()["final_bytes"] == prefix_bytes  # untouched
    assert cache.get_seq_length() == 6 and copied.get_seq_length() == 6 + 3 + 3


def kv(tokens: int, kv_heads: int = 2, head_dim: int = 16) -> torch.Tensor:
    """(batch=1, kv_heads, tokens, head_dim): tiny-llama's keys or values for `tokens` new tokens."""
    return torch.ones(1, kv_heads, tokens, head_dim)


def test_the_mixin_must_come_before_a_transformers_cache():
    class NotACache(InstrumentedCacheMixin):
        pass

    with pytest.raises(TypeError, match="NotACache: InstrumentedCacheMixin must come before a transformers Cache"):
        NotACache()._kvlab_setup()


@pytest.mark.parametrize("variant", variants())
def test_a_recorded_cache_frees_itself_once_its_trace_is_read(tiny, prompt_ids, variant):
    model = tiny("tiny-llama")
    cache = prefilled(model, variant.kind, variant.options, prompt_ids(4))
    assert cache.trace.updates  # read: nothing deferred holds the cache any more
    # no reference cycle through the cache: freed when its last name goes, without the garbage collector
    gone = weakref.ref(cache)
    gc.disable()
    try:
        del cache
        assert gone() is None
    finally:
        gc.enable()


def test_a_strategy_between_the_mixin_and_transformers_gets_its_own_update_called():
    class Doubling(DynamicCache):  # as transformers' docs build a cache of one's own: a subclass overriding update
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return super().update(2 * key_states, 2 * value_states, layer_idx, *args, **kwargs)

    class Watched(InstrumentedCacheMixin, Doubling):
        def __init__(self):
            super().__init__()
            self._kvlab_setup()

    cache = Watched()
    keys, _ = cache.update(kv(3), kv(3), 0)
    assert torch.equal(keys, 2 * kv(3)) and cache.trace.updates[0]["logical_length"] == 3


def test_bound_argument_reads_a_constructor_argument_however_it_was_passed():
    config = tiny_config("tiny-llama")
    assert bound_argument(DynamicCache, "config", (), {"config": config}) is config
    assert bound_argument(DynamicCache, "config", (None, config), {}) is config  # after ddp_cache_data
    assert bound_argument(DynamicCache, "config", (), {}) is None


def test_layer_kinds_and_query_heads_come_from_the_config_else_from_the_layers():
    config = tiny_config("tiny-gemma3")  # [sliding, sliding, full] x 2; 4 query heads over 2 KV heads
    with_config, bare = InstrumentedDynamicCache(config=config), InstrumentedDynamicCache()
    for cache in (with_config, bare):
        for layer_idx in range(6):
            cache.update(kv(3), kv(3), layer_idx)
    assert [e["layer_kind"] for e in with_config.trace.updates] == ["sliding", "sliding", "full"] * 2
    assert {e["layer_kind"] for e in bare.trace.updates} == {"full"}  # plain DynamicLayers: nothing slides
    # 2 x batch x heads x queries x slots x (key dim + value dim): the query heads with a config, else the KV heads
    assert with_config.trace.updates[2]["attention_flops"] == 2 * 1 * 4 * 3 * 3 * 32
    assert bare.trace.updates[2]["attention_flops"] == 2 * 1 * 2 * 3 * 3 * 32


def test_past_recording_is_marked_from_the_step_it_starts(prompt_ids):
    cache = kvlab.make_cache("dynamic", tiny_config("tiny-gemma3"))
    cache.update(kv(3), kv(3), 0)
    cache.kvlab_recorder.step = 2  # as two forwards would have left it
    cache.activate_past_recording()
    assert cache.trace.meta["past_recording_from_step"] == 2 and cache.is_recording_past(0)


def test_a_linear_attention_model_logs_its_state_updates_and_reads(tiny, prompt_ids, greedy):
    cache = kvlab.make_cache("dynamic", tiny("tiny-mamba").config)
    greedy(tiny("tiny-mamba"), prompt_ids(6), cache, 3)
    ops = {(e["step"], e["op"]) for e in cache.trace.updates}
    assert {(0, "conv"), (0, "recurrent")} <= ops  # the prefill writes both states
    assert {(1, "read"), (2, "read")} <= ops  # decoding updates them in place: the read is the per-step signal
