"""The instrumented class of each cache kind of `kvlab.cache_kinds.KINDS` (the one table, which names the classes
without torch), resolved here where torch and transformers are imported."""

from __future__ import annotations

from kvlab import _compat
from kvlab.cache_kinds import KINDS, CacheKind
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
# every kind `generate` builds a Cache for -> kvlab's subclass of that class which records (`CacheKind.twin`)
INSTRUMENTED = {kind.name: next(t for t in _TWINS if t.__name__ == kind.twin) for kind in KINDS if kind.twin}


def transformers_class(kind: CacheKind) -> type:
    """transformers' class of `kind` (offloading is a flag of it, `kind.offloads`)."""
    return getattr(_compat, kind.cache_class)
