"""The classes of each cache kind of `kvlab.cache_kinds.KINDS` (which names them without torch), resolved."""

from __future__ import annotations

from dataclasses import dataclass

from kvlab import _compat, cache_kinds
from kvlab.caches.dynamic import InstrumentedDynamicCache
from kvlab.caches.offloaded import InstrumentedOffloadedCache, InstrumentedOffloadedStaticCache
from kvlab.caches.quantized import InstrumentedQuantizedCache
from kvlab.caches.static import InstrumentedStaticCache

_TWINS = (
    InstrumentedDynamicCache,
    InstrumentedStaticCache,
    InstrumentedOffloadedCache,
    InstrumentedOffloadedStaticCache,
    InstrumentedQuantizedCache,
)


@dataclass(frozen=True)
class CacheKind:
    name: str
    transformers_class: type
    offloading: bool
    instrumented: type  # kvlab's subclass of `transformers_class` that records


KINDS = tuple(
    CacheKind(
        kind.name,
        getattr(_compat, kind.cache_class),
        kind.offloads,
        next(twin for twin in _TWINS if twin.__name__ == kind.twin),
    )
    for kind in cache_kinds.KINDS
    if kind.twin
)
