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
from kvlab.caches.adopt import adopt, cache_kind, is_instrumented, release, twin_class
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
    assert twin.__mro__[1:4] == (InstrumentedDynamicCache, InstrumentedDynamicCache.__mro__[1], MyCache)
    assert twin_class(MyCache, offloading=True).__mro__[1] is InstrumentedOffloadedCache


def test_a_cache_kvlab_cannot_instrument_is_refused_by_name():
    class Elsewhere(_compat.Cache):
        pass

    with pytest.raises(TypeError, match="kvlab cannot instrument a Elsewhere: it instruments DynamicCache"):
        twin_class(Elsewhere)


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
