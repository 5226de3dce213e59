"""Each cache kind once: its transformers class, the offloading flag that selects it, and kvlab's instrumented twin.

`cache_kinds.CACHE_KINDS` is the light list of names (no imports, for the command line); this is what each name
is made of, and `factory.CACHE_CLASSES` (build by name) and `adopt.TWINS`/`adopt.TWIN_KINDS` (instrument a cache
that exists) are read from it, so a kind added in one place is added in all three.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab import _compat
from kvlab.caches.dynamic import InstrumentedDynamicCache
from kvlab.caches.offloaded import InstrumentedOffloadedCache, InstrumentedOffloadedStaticCache
from kvlab.caches.quantized import InstrumentedQuantizedCache
from kvlab.caches.static import InstrumentedStaticCache


@dataclass(frozen=True)
class CacheKind:
    name: str  # the `cache_implementation` name, and the trace's `cache_kind`
    transformers_class: type
    offloading: bool  # offloading is a flag of DynamicCache/StaticCache, not a class of its own
    instrumented: type  # kvlab's subclass of `transformers_class` that records


KINDS = (
    CacheKind("dynamic", _compat.DynamicCache, False, InstrumentedDynamicCache),
    CacheKind("static", _compat.StaticCache, False, InstrumentedStaticCache),
    CacheKind("offloaded", _compat.DynamicCache, True, InstrumentedOffloadedCache),
    CacheKind("offloaded_static", _compat.StaticCache, True, InstrumentedOffloadedStaticCache),
    CacheKind("quantized", _compat.QuantizedCache, False, InstrumentedQuantizedCache),
)
