"""Instrument a transformers cache that already exists, in place (what `kvlab.watch` does to the caches it meets).

The object's class is switched to its instrumented twin (a subclass that only adds recording), so the same layers,
tensors and object keep serving the model; `release` switches it back.
"""

from __future__ import annotations

import functools
import weakref

from kvlab import _compat
from kvlab.cache_kinds import KINDS
from kvlab.caches.base import InstrumentedCacheMixin
from kvlab.caches.encoder_decoder import InstrumentedEncoderDecoderCache
from kvlab.caches.kinds import INSTRUMENTED, transformers_class
from kvlab.caches.offloaded import stop_transfer_recording
from kvlab.caches.quantized import InstrumentedQuantizedCache
from kvlab.caches.strategy import InstrumentedCache, InstrumentedOffloadingCache, strategy_layer_name
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.log import get_logger
from kvlab.recording.layer_state import LayerState, forget_tokens, read_layer
from kvlab.recording.recorder import Recorder
from kvlab.recording.storage import outside_bytes, outside_names

log = get_logger(__name__)

# (transformers class, offloading) -> its instrumented twin; twin -> its `cache_implementation` name. transformers'
# own `Cache` comes last in every MRO: a cache of a user's layer class (a strategy), or any other Cache subclass.
TWINS = {
    **{(transformers_class(kind), kind.offloads): INSTRUMENTED[kind.name] for kind in KINDS if kind.twin},
    (_compat.Cache, False): InstrumentedCache,
    (_compat.Cache, True): InstrumentedOffloadingCache,
}
TWIN_KINDS = {twin: name for name, twin in INSTRUMENTED.items()}


class CannotInstrumentError(KvlabUserError, TypeError):
    """A cache object kvlab cannot switch to an instrumented class: `kvlab.watch` leaves it unwatched, in one line."""


def twin_class(cls: type, offloading: bool = False) -> type:
    """The instrumented class for instances of `cls`: a listed twin, or one derived for a subclass of them."""
    if (cls, offloading) in TWINS:
        return TWINS[(cls, offloading)]
    for base in cls.__mro__[1:]:
        if (base, offloading) in TWINS:
            return _derived_twin(cls, TWINS[(base, offloading)])
    raise CannotInstrumentError(
        _("kvlab cannot instrument a {cls}: it instruments transformers' Cache and its subclasses.").format(
            cls=cls.__name__
        )
    )


@functools.cache
def _derived_twin(cls: type, twin: type) -> type:
    # MRO: derived -> twin -> InstrumentedCacheMixin -> cls -> transformers' base class
    try:
        return type(f"Instrumented{cls.__name__}", (twin, cls), {})
    except TypeError as err:  # a metaclass, layout or MRO conflict: the class cannot take a recording subclass
        raise CannotInstrumentError(
            _("kvlab cannot instrument a {cls}: {reason}").format(cls=cls.__name__, reason=err)
        ) from None


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
    if isinstance(cache, InstrumentedCache):  # a strategy: its layer class names it
        return strategy_layer_name(cache)
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
        _switch_class(cache, twin_class(original, _compat.is_offloading(cache)))
        if isinstance(cache, InstrumentedQuantizedCache):  # the twin of a QuantizedCache (and only of one)
            cache.backend = _compat.quantized_backend(cache)
            cache._kvlab_adopt_layers()
        cache._kvlab_setup(config=config, recorder=recorder, role=role)
        _log_what_it_holds(cache)
    cache._kvlab_original_class = original
    if not isinstance(cache, InstrumentedEncoderDecoderCache):  # the pair's own attributes are its two caches
        cache.kvlab_recorder.add_outside_reader(_OutsideReader(cache))
        cache.kvlab_recorder.read_outside()
    if owner is not None:
        cache._kvlab_watch = owner


def _switch_class(cache, twin: type) -> None:
    try:
        cache.__class__ = twin
    except TypeError as err:  # __slots__ or a layout the twin does not share
        raise CannotInstrumentError(
            _("kvlab cannot instrument a {cls}: {reason}").format(cls=type(cache).__name__, reason=err)
        ) from None


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


def _is_cache(value) -> bool:
    return isinstance(value, _compat.Cache)


class _OutsideReader:
    """Reads what a cache holds beside its `layers` for its recorder (a model's own Cache subclass may keep state
    there: MiniMax's `linear_cache`). It holds the cache weakly; a deep copy of the cache (its recorder copied with
    it) gets a reader of the copy."""

    def __init__(self, cache):
        self.cache = weakref.ref(cache)

    def __deepcopy__(self, memo):
        cache = self.cache()
        return _OutsideReader(memo.get(id(cache), cache))

    def __call__(self, recorder: Recorder) -> None:
        cache = self.cache()
        if cache is not None and cache.__dict__.get("kvlab_recorder") is recorder:  # not gone, not released
            _read_outside(cache)


def _read_outside(cache) -> None:
    """Record what `cache` holds beside its `layers`. The attribute names are found once per cache and again only
    when its attributes change."""
    found = cache.__dict__.get("_kvlab_outside")  # (how many attributes the cache had, the names found then)
    if found is None or found[0] != len(cache.__dict__):
        cache.__dict__["_kvlab_outside"] = None  # the key first, so that the count below includes it
        found = cache.__dict__["_kvlab_outside"] = (len(cache.__dict__), outside_names(cache, _is_cache))
    names = found[1]
    if not names:
        return
    kinds = cache._kvlab_layer_kinds
    outside = outside_bytes(cache, names, max(len(cache.layers), len(kinds)), cache.layers, _is_cache)

    def state_of(i: int) -> LayerState:
        if i < len(cache.layers):
            return read_layer(cache.layers[i], cache._kvlab_layer_kind(i))
        return LayerState(kinds[i] if i < len(kinds) else "full", 0, 0, 0, 0, 0, 0, "none")

    if outside.by_layer or outside.by_name:
        _warn_outside(cache._kvlab_original_class.__name__, names)
    cache.kvlab_recorder.record_outside(cache.kvlab_role, outside, state_of)


@functools.cache
def _warn_outside(cache_class: str, names: tuple[str, ...]) -> None:
    log.warning(
        "%s",
        _(
            "kvlab has no slot reading for {cache_class}.{names}: the trace counts its bytes (beside the layers), "
            "not its slots."
        ).format(cache_class=cache_class, names="/".join(names)),
    )


def release(cache) -> None:
    """Undo `adopt`: the cache is its own transformers class again, its layers too, with no kvlab attributes."""
    original = cache.__dict__.get("_kvlab_original_class")
    if original is None:
        return
    if isinstance(cache, InstrumentedEncoderDecoderCache):
        release(cache.self_attention_cache)
        release(cache.cross_attention_cache)
    else:
        cache.kvlab_recorder.read_outside()  # what the last forward changed beside the layers
        stop_transfer_recording(cache)
        if isinstance(cache, InstrumentedQuantizedCache):
            cache._kvlab_release_layers()
        for layer in cache.layers:
            forget_tokens(layer)  # a strategy layer's count of tokens seen
    cache.__class__ = original
    for name in [n for n in cache.__dict__ if n.startswith(("kvlab_", "_kvlab_"))]:
        del cache.__dict__[name]
    if issubclass(original, _compat.QuantizedCache):
        cache.__dict__.pop("backend", None)  # set by adopt
