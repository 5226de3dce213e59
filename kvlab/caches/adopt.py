"""Instrument a transformers cache that already exists, in place (what `kvlab.watch` does to the caches it meets).

The object's class is switched to its instrumented twin (a subclass that only adds recording), so the same layers,
tensors and object keep serving the model; `release` switches it back.
"""

from __future__ import annotations

import functools

from kvlab import _compat
from kvlab.caches.base import InstrumentedCacheMixin
from kvlab.caches.encoder_decoder import InstrumentedEncoderDecoderCache
from kvlab.caches.kinds import KINDS
from kvlab.caches.offloaded import stop_transfer_recording
from kvlab.caches.quantized import InstrumentedQuantizedCache
from kvlab.i18n import _
from kvlab.recording.layer_state import read_layer
from kvlab.recording.recorder import Recorder

# (transformers class, offloading) -> its instrumented twin; twin -> its `cache_implementation` name
TWINS = {(kind.transformers_class, kind.offloading): kind.instrumented for kind in KINDS}
TWIN_KINDS = {kind.instrumented: kind.name for kind in KINDS}


def twin_class(cls: type, offloading: bool = False) -> type:
    """The instrumented class for instances of `cls`: a listed twin, or one derived for a subclass of them."""
    if (cls, offloading) in TWINS:
        return TWINS[(cls, offloading)]
    for base in cls.__mro__[1:]:
        if (base, offloading) in TWINS:
            return _derived_twin(cls, TWINS[(base, offloading)])
    raise TypeError(
        _(
            "kvlab cannot instrument a {cls}: it instruments DynamicCache, StaticCache, QuantizedCache, "
            "EncoderDecoderCache and their subclasses."
        ).format(cls=cls.__name__)
    )


@functools.cache
def _derived_twin(cls: type, twin: type) -> type:
    # MRO: derived -> twin -> InstrumentedCacheMixin -> cls -> transformers' base class
    return type(f"Instrumented{cls.__name__}", (twin, cls), {})


@functools.cache
def _encoder_decoder_twin(cls: type) -> type:
    if cls is _compat.EncoderDecoderCache:
        return InstrumentedEncoderDecoderCache
    return type(f"Instrumented{cls.__name__}", (InstrumentedEncoderDecoderCache, cls), {})


def is_instrumented(cache) -> bool:
    return isinstance(cache, (InstrumentedCacheMixin, InstrumentedEncoderDecoderCache))


def cache_kind(cache) -> str:
    """The `cache_implementation` name of an instrumented cache ("encoder_decoder" for the pair)."""
    if isinstance(cache, InstrumentedEncoderDecoderCache):
        return "encoder_decoder"
    return next((TWIN_KINDS[cls] for cls in type(cache).__mro__ if cls in TWIN_KINDS), type(cache).__name__)


def adopt(cache, config, *, recorder: Recorder | None = None, role: str = "self", owner=None) -> None:
    """Instrument `cache` in place for a model `config`, logging into `recorder` (a new one by default).

    A cache that already holds tokens gets one "attach" update per layer (step 0); the next forward is step 1."""
    original: type = type(cache)  # plain `type`: hashable to mypy (python/mypy#11470)
    if isinstance(cache, _compat.EncoderDecoderCache):
        shared = recorder if recorder is not None else Recorder()
        adopt(cache.self_attention_cache, config, recorder=shared, role="self")
        adopt(cache.cross_attention_cache, config, recorder=shared, role="cross")
        cache.__class__ = _encoder_decoder_twin(original)
    else:
        cache.__class__ = twin_class(original, _compat.is_offloading(cache))
        if isinstance(cache, InstrumentedQuantizedCache):  # the twin of a QuantizedCache (and only of one)
            cache.backend = _compat.quantized_backend(cache)
            cache._kvlab_adopt_layers()
        cache._kvlab_setup(config=config, recorder=recorder, role=role)
        _log_what_it_holds(cache)
    cache._kvlab_original_class = original
    if owner is not None:
        cache._kvlab_watch = owner


def _log_what_it_holds(cache) -> None:
    recorder = cache.kvlab_recorder
    states = [read_layer(layer, cache._kvlab_layer_kind(i)) for i, layer in enumerate(cache.layers)]
    tokens = max((state.logical_length or 0 for state in states), default=0)  # None: a layer with no count
    if cache.kvlab_role == "self":
        recorder.trace.meta["first_seen_tokens"] = tokens
    if tokens == 0 and not any(state.bytes_held for state in states):
        return
    for i, layer in enumerate(cache.layers):
        recorder.record_update(cache.kvlab_role, i, layer, cache._kvlab_layer_kind(i), "attach", 0, 0.0)
    recorder.step = max(recorder.step, 1)


def release(cache) -> None:
    """Undo `adopt`: the cache is its own transformers class again, its layers too, with no kvlab attributes."""
    original = cache.__dict__.get("_kvlab_original_class")
    if original is None:
        return
    if isinstance(cache, InstrumentedEncoderDecoderCache):
        release(cache.self_attention_cache)
        release(cache.cross_attention_cache)
    else:
        stop_transfer_recording(cache)
        if isinstance(cache, InstrumentedQuantizedCache):
            cache._kvlab_release_layers()
    cache.__class__ = original
    for name in [n for n in cache.__dict__ if n.startswith(("kvlab_", "_kvlab_"))]:
        del cache.__dict__[name]
    if issubclass(original, _compat.QuantizedCache):
        cache.__dict__.pop("backend", None)  # set by adopt
