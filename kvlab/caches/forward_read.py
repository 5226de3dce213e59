"""A watched `DynamicCache` read once per forward instead of once per layer update (issue 41).

Under `kvlab.watch`, each forward of a model whose cache is a plain `DynamicCache` runs with the cache switched to
`ForwardReadDynamicCache`: the instrumented twin with transformers' own `update`, so no kvlab code runs per layer
per token. The watch's hook after the forward flushes the recorder, which logs each layer the forward updated from
what the layer holds (`Recorder.read_after_forward`: the same events and work, the update's own `seconds` null) and
switches the cache back to its twin. Anything that reads the record mid-forward flushes too, and the rest of that
forward is then recorded update by update: the record never misses an update.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.kinds import InstrumentedDynamicCache
from kvlab.recording.layer_state import DYNAMIC_READERS, read_dynamic


class ForwardReadDynamicCache(InstrumentedDynamicCache):
    """`InstrumentedDynamicCache` for the length of one watched forward: its `update` is transformers' own."""

    update = _compat.DynamicCache.update


def read_after_forward(cache, started: float) -> bool:
    """Switch `cache` to `ForwardReadDynamicCache` until its recorder's next flush, if every layer it has is a plain
    dynamic one (the layers `Recorder.defer` reads) and it is exactly the watched `DynamicCache`; `started`: when
    the forward began. Whether it did."""
    if type(cache) is not InstrumentedDynamicCache:
        return False
    replicated = getattr(cache, "layer_class_to_replicate", None)  # the class of the layers `update` adds
    layer_types = [type(layer) for layer in cache.layers] + ([replicated] if replicated is not None else [])
    if not all(DYNAMIC_READERS.get(layer_type) is read_dynamic for layer_type in layer_types):
        return False
    cache.kvlab_recorder.read_after_forward(cache, InstrumentedDynamicCache, started)
    cache.__class__ = ForwardReadDynamicCache
    return True
