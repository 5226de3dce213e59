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
from kvlab.recording.layer_state import read_after_update
from kvlab.recording.recorder import layer_keys


class ForwardReadDynamicCache(InstrumentedDynamicCache):
    """`InstrumentedDynamicCache` for the length of one watched forward: its `update` is transformers' own."""

    update = _compat.DynamicCache.update


def read_after_forward(cache, started: float) -> bool:
    """Switch `cache` to `ForwardReadDynamicCache` until its recorder's next flush, if it is exactly the watched
    `DynamicCache` and every layer it has or adds is one `read_after_update` allows; `started`: when the forward
    began. Whether it did.

    After a first forward read, the next forward needs no look at the layers: the recorder kept their keys when it
    read them, and nothing recorded since (`Recorder.keys_after_read`)."""
    if type(cache) is not InstrumentedDynamicCache:
        return False
    recorder = cache.kvlab_recorder
    keys = recorder.keys_after_read(cache)
    if keys is None:
        replicated = getattr(cache, "layer_class_to_replicate", None)  # the class of the layers `update` adds
        layer_types = [type(layer) for layer in cache.layers] + ([replicated] if replicated is not None else [])
        if not all(read_after_update(layer_type) for layer_type in layer_types):
            return False
        keys = layer_keys(cache)
    recorder.read_after_forward(cache, InstrumentedDynamicCache, keys, started)
    cache.__class__ = ForwardReadDynamicCache
    return True
