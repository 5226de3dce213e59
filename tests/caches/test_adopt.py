"""`kvlab.caches.adopt`: a transformers cache that already exists is instrumented in place (its class switched to
its instrumented twin: same object, same layers, same outputs) and given back its own class by `release`.

The watch that adopts every cache it meets is tested in tests/test_watcher.py (a cache first seen filled, copies);
here the switch itself, on tiny-llama and tiny-bart."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache, QuantizedCache, StaticCache

from kvlab import _compat
from kvlab.caches import (
    InstrumentedDynamicCache,
    InstrumentedEncoderDecoderCache,
    InstrumentedOffloadedCache,
    InstrumentedOffloadedStaticCache,
    InstrumentedQuantizedCache,
    InstrumentedStaticCache,
)
from kvlab.caches.adopt import CannotInstrumentError, adopt, cache_kind, is_instrumented, release, twin_class
from kvlab.caches.base import InstrumentedCacheMixin
from kvlab.caches.strategy import InstrumentedCache, InstrumentedOffloadingCache
from kvlab.recording.recorder import Recorder


def dynamic_cache(config):
    return DynamicCache(config=config)


def static_cache(config):
    return StaticCache(config=config, max_cache_len=16)


def hqq_cache(config):
    return QuantizedCache("hqq", config, nbits=4, q_group_size=16, residual_length=4)


CACHES = [  # (id, transformers cache for a config, its instrumented twin, the cache kind the trace names, reference)
    ("dynamic", dynamic_cache, InstrumentedDynamicCache, "dynamic", dynamic_cache),
    # transformers' offloading needs CUDA: the same cache without it is the reference (moves change no number)
    (
        "offloaded",
        lambda c: DynamicCache(config=c, offloading=True),
        InstrumentedOffloadedCache,
        "offloaded",
        dynamic_cache,
    ),
    ("static", static_cache, InstrumentedStaticCache, "static", static_cache),
    (
        "offloaded_static",
        lambda c: StaticCache(config=c, max_cache_len=16, offloading=True),
        InstrumentedOffloadedStaticCache,
        "offloaded_static",
        static_cache,
    ),
    (
        "quantized",
        hqq_cache,
        InstrumentedQuantizedCache,
        "quantized",
        hqq_cache,
    ),  # hqq: its layers are swapped, then back
]


@pytest.mark.parametrize("build, twin, kind, reference", [c[1:] for c in CACHES], ids=[c[0] for c in CACHES])
def test_adopted_in_place_it_generates_the_same_and_records(tiny, prompt_ids, greedy, build, twin, kind, reference):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    plain, cache = reference(model.config), build(model.config)
    layers = list(cache.layers)
    adopt(cache, model.config)
    assert type(cache) is twin and is_instrumented(cache) and cache_kind(cache) == kind
    assert cache.layers == layers and cache.trace.events == []  # same layers; nothing held yet, nothing logged
    assert cache.trace.meta["first_seen_tokens"] == 0
    assert torch.equal(greedy(model, ids, cache, 3), greedy(model, ids, plain, 3))
    assert cache.trace.summary()["steps"] == 3
    if kind == "quantized":
        assert cache.backend == "hqq"  # what transformers keeps only as its layer class


@pytest.mark.parametrize("build", [c[1] for c in CACHES], ids=[c[0] for c in CACHES])
def test_release_gives_the_cache_its_own_class_back(tiny, build):
    config = tiny("tiny-llama").config
    cache = build(config)
    original, layer_classes = type(cache), [type(layer) for layer in cache.layers]
    adopt(cache, config, owner="a watch")
    assert cache._kvlab_watch == "a watch"
    release(cache)
    assert type(cache) is original and not is_instrumented(cache)
    assert [type(layer) for layer in cache.layers] == layer_classes
    assert not [name for name in vars(cache) if name.startswith(("kvlab_", "_kvlab_"))] and "backend" not in vars(cache)
    release(cache)  # a cache kvlab never adopted: nothing to undo


def test_a_subclass_gets_a_twin_of_its_own_once():
    class MyCache(DynamicCache):
        pass

    twin = twin_class(MyCache)
    assert twin.__name__ == "InstrumentedMyCache" and twin is twin_class(MyCache)
    mro = twin.__mro__  # kvlab's classes first, then the user's, then transformers'
    assert mro[1] is InstrumentedDynamicCache
    assert mro.index(MyCache) == mro.index(InstrumentedCacheMixin) + 1 < mro.index(DynamicCache)
    assert twin_class(MyCache, offloading=True).__mro__[1] is InstrumentedOffloadedCache


def test_any_cache_subclass_gets_the_generic_twin_and_what_cannot_be_switched_is_refused_by_name():
    class Elsewhere(_compat.Cache):
        pass

    assert twin_class(_compat.Cache) is InstrumentedCache
    assert twin_class(Elsewhere).__mro__[1] is InstrumentedCache
    assert twin_class(Elsewhere, offloading=True).__mro__[1] is InstrumentedOffloadingCache
    with pytest.raises(CannotInstrumentError, match="kvlab cannot instrument a object: it instruments transformers'"):
        twin_class(object)

    class Sealed(_compat.Cache):
        def __init_subclass__(cls, **kwargs):
            raise TypeError("Sealed takes no subclass")

    with pytest.raises(CannotInstrumentError, match="kvlab cannot instrument a Sealed: Sealed takes no subclass"):
        twin_class(Sealed)


def test_an_encoder_decoder_pair_is_adopted_as_one_trace(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-bart"), prompt_ids(7)
    pair = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    recorder = Recorder()
    adopt(pair, model.config, recorder=recorder)
    assert type(pair) is InstrumentedEncoderDecoderCache and cache_kind(pair) == "encoder_decoder"
    assert pair.self_attention_cache.kvlab_recorder is pair.cross_attention_cache.kvlab_recorder is recorder
    greedy(model, ids, pair, 3)
    roles = {(e["role"], e["step"]) for e in pair.trace.updates}
    assert {("cross", 0), ("self", 0), ("self", 2)} <= roles and ("cross", 1) not in roles  # cross: written once
    release(pair)
    assert type(pair) is EncoderDecoderCache and type(pair.self_attention_cache) is DynamicCache


class _KeepsStateBeside(DynamicCache):
    """A model's own Cache subclass that keeps a tensor per layer beside `layers`, as MiniMax's `linear_cache`."""

    def __init__(self):
        super().__init__()
        self.side_states: list = []


def _independent_count(obj, seen=None) -> int:
    """Every distinct storage reachable from `obj` through attributes and containers, written apart from kvlab's."""
    storages: dict = {}
    stack, visited = [obj], set()
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            if value.dim() or value.is_floating_point():
                storages[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
        elif id(value) not in visited and not isinstance(value, (type, str, int, float, torch.dtype, torch.device)):
            visited.add(id(value))
            if isinstance(value, dict):
                stack += [v for k, v in value.items() if not str(k).startswith(("_kvlab", "kvlab_"))]
            elif isinstance(value, (list, tuple)):
                stack += list(value)
            elif hasattr(value, "__dict__"):
                stack.append(vars(value))
    return sum(storages.values())


def test_a_tensor_list_beside_the_layers_is_counted_in_the_trace():
    from kvlab.models.tiny import tiny_config

    config = tiny_config("tiny-llama")
    cache = _KeepsStateBeside()
    adopt(cache, config)
    trace = cache.trace
    kv = torch.zeros(2, 2, 5, 16)  # (batch, kv_heads, tokens, head_dim)
    for step in range(3):
        for i in range(config.num_hidden_layers):
            cache.update(kv if step == 0 else kv[:, :, :1], kv if step == 0 else kv[:, :, :1], i)
            state = torch.zeros(2, 4, 8, 8 + step)  # this layer's own state, replaced each step, growing
            if len(cache.side_states) <= i:
                cache.side_states.append(state)
            else:
                cache.side_states[i] = state
    release(cache)  # the last forward's change is read as the watch ends
    final = trace.final_layers()
    assert sum(e["bytes_held"] for e in final) == trace.summary()["final_bytes"] == _independent_count(cache)
    assert [e["bytes_held"] for e in final] == [
        _independent_count(layer) + _independent_count(side) for layer, side in zip(cache.layers, cache.side_states)
    ]
    assert any(e["op"] == "outside" for e in trace.updates)


def test_minimax_linear_state_is_counted_exactly_in_the_trace_and_the_size():
    import kvlab
    from kvlab.size.meta import meta_cache_bytes

    model = kvlab.tiny_model("minimax")
    ids = torch.randint(3, 100, (2, 12), generator=torch.Generator().manual_seed(0))  # (batch, tokens)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # one row left-padded
    kwargs = dict(attention_mask=mask, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    plain = model.generate(ids, return_dict_in_generate=True, **kwargs)
    with kvlab.watch(model) as watch:
        watched = model.generate(ids, return_dict_in_generate=True, **kwargs)
    cache = watched.past_key_values
    assert torch.equal(plain.sequences, watched.sequences)
    held = _independent_count(cache)
    assert type(cache).__name__ == "MiniMaxCache" and _independent_count(cache.linear_cache) > 0
    assert held == _independent_count(plain.past_key_values)
    assert sum(e["bytes_held"] for e in watch.trace.final_layers()) == watch.trace.summary()["final_bytes"] == held
    assert meta_cache_bytes(model.config, 12 + 4 - 1, prefill=12, batch=2).bytes == held


def test_a_deep_copy_records_its_own_state_beside_the_layers_into_its_own_trace():
    import copy

    from kvlab.models.tiny import tiny_config

    config = tiny_config("tiny-llama")
    cache = _KeepsStateBeside()
    adopt(cache, config)
    kv = torch.zeros(1, 2, 3, 16)  # (batch, kv_heads, tokens, head_dim)
    for i in range(config.num_hidden_layers):
        cache.update(kv, kv, i)
        cache.side_states.append(torch.zeros(1, 4))
    copied = copy.deepcopy(cache)
    before = len(cache.trace.events)
    for i in range(config.num_hidden_layers):  # the copy's next step: its own trace only
        copied.update(kv[:, :, :1], kv[:, :, :1], i)
        copied.side_states[i] = torch.zeros(1, 8)
    copied.update(kv[:, :, :1], kv[:, :, :1], 0)  # the copy's next step begins: its last one's state is read
    assert len(cache.trace.events) == before
    shares = [e for e in copied.trace.updates[before:] if e["op"] == "outside"]  # each step's, at its end
    assert [e["layer_idx"] for e in shares] == list(range(config.num_hidden_layers)) * 2
    shares = shares[config.num_hidden_layers :]
    own = [e for e in copied.trace.updates if e["op"] == "kv" and e["layer_idx"] == 0][-2]  # before the last update
    assert shares[0]["bytes_held"] - own["bytes_held"] == (8 - 4) * 4  # the copy's share grew from (1, 4) to (1, 8)
