"""The instrumented class of each cache kind of `kvlab.cache_kinds.KINDS` (the one table, which names the classes
without torch), resolved here where torch and transformers are imported.

DynamicCache, instrumented: full layers grow by concatenation, sliding/chunked layers stop at the window.
StaticCache, instrumented: every layer is allocated at `max_cache_len` up front and masks what is empty.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.cache_kinds import KINDS, CacheKind
from kvlab.caches.base import BuiltFromConfig
from kvlab.caches.crop_rules import check_dynamic_sliding, check_static_sliding
from kvlab.caches.offloaded import OffloadingMixin
from kvlab.caches.quantized import InstrumentedQuantizedCache


class InstrumentedDynamicCache(BuiltFromConfig, _compat.DynamicCache):
    """`transformers.DynamicCache` that records every layer update into `self.trace`; takes DynamicCache's
    arguments, plus `trace=` / `recorder=` to log into a shared trace. Crop guard: `check_dynamic_sliding`."""

    _kvlab_transformers_class = _compat.DynamicCache

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        for idx, layer in enumerate(self.layers):
            state = _compat.dynamic_sliding_state(layer)  # (seen, window, records the past), sliding layers only
            if state is not None:
                check_dynamic_sliding(tokens_to_remove, idx, self._kvlab_layer_kind(idx), *state)


class InstrumentedStaticCache(BuiltFromConfig, _compat.StaticCache):
    """`transformers.StaticCache` that records every layer update into `self.trace`. Crop guard:
    `check_static_sliding` (a wrapped sliding layer's evicted tokens are gone)."""

    _kvlab_transformers_class = _compat.StaticCache

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        for idx, layer in enumerate(self.layers):
            state = _compat.static_sliding_state(layer)  # (seen, window), sliding layers that hold tokens only
            if state is not None:
                check_static_sliding(tokens_to_remove, idx, *state)

    def _kvlab_crop_layers(self, tokens_to_remove: int) -> None:
        for layer in self.layers:  # what transformers' Cache.crop does, through _compat (static layers crop from 5.24)
            _compat.crop_static_layer(layer, tokens_to_remove)


class InstrumentedOffloadedCache(OffloadingMixin, InstrumentedDynamicCache):
    """`cache_implementation="offloaded"`: a DynamicCache with `offloading=True`."""

    def __init__(self, *args, offloading: bool = True, **kwargs):
        super().__init__(*args, offloading=offloading, **kwargs)


class InstrumentedOffloadedStaticCache(OffloadingMixin, InstrumentedStaticCache):
    """`cache_implementation="offloaded_static"`: a StaticCache with `offloading=True`."""

    def __init__(self, *args, offloading: bool = True, **kwargs):
        super().__init__(*args, offloading=offloading, **kwargs)


_TWINS = (
    InstrumentedDynamicCache,
    InstrumentedStaticCache,
    InstrumentedOffloadedCache,
    InstrumentedOffloadedStaticCache,
    InstrumentedQuantizedCache,
)
# every kind `generate` builds a Cache for -> kvlab's subclass of that class which records (`CacheKind.twin`)
INSTRUMENTED = {kind.name: next(t for t in _TWINS if t.__name__ == kind.twin) for kind in KINDS if kind.twin}


def transformers_class(kind: CacheKind) -> type:
    """transformers' class of `kind` (offloading is a flag of it, `kind.offloads`)."""
    return getattr(_compat, kind.cache_class)
