"""Offloaded caches: layers live on the CPU and are prefetched to the accelerator one layer ahead.

transformers' offloaded caches fail on a CPU-only build (a CUDA stream sync in `Cache.update`); kvlab runs the
same schedule everywhere and synchronises streams only on an accelerator, so the schedule can be studied anywhere.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from kvlab import _compat
from kvlab.caches.base import InstrumentedCacheMixin
from kvlab.recording.recorder import now
from kvlab.recording.storage import storage_bytes
from kvlab.recording.work import attention_counts, layer_heads

if TYPE_CHECKING:
    from kvlab._compat import CacheLayerMixin


def _move_recorded(layer, direction: str, move) -> None:
    src = str(layer.keys.device) if layer.is_initialized else "none"
    started = now()
    move()
    if layer.is_initialized:
        layer._kvlab_recorder.record_transfer(
            layer._kvlab_role,
            layer._kvlab_idx,
            direction,
            storage_bytes(layer.keys, layer.values),
            now() - started,
            src,
            str(layer.keys.device),
        )


@functools.cache
def _recording_class(layer_class: type[CacheLayerMixin]) -> type:
    """A subclass of `layer_class` that logs its `offload` and `prefetch` moves; no new state, so a layer's
    `__class__` can be swapped in place."""

    def offload(self):
        _move_recorded(self, "offload", lambda: layer_class.offload(self))

    def prefetch(self):
        _move_recorded(self, "prefetch", lambda: layer_class.prefetch(self))

    methods = {"offload": offload, "prefetch": prefetch, "kvlab_recorded_class": layer_class}
    return type(f"TransferRecording{layer_class.__name__}", (layer_class,), methods)


def stop_transfer_recording(cache) -> None:
    """Give every layer back its own class."""
    for layer in cache.layers:
        original = getattr(type(layer), "kvlab_recorded_class", None)
        if original is not None:
            layer.__class__ = original
            for name in ("_kvlab_recorder", "_kvlab_idx", "_kvlab_role"):
                layer.__dict__.pop(name, None)
    cache.__dict__.pop("_kvlab_watched", None)


class OffloadingMixin(InstrumentedCacheMixin):
    """Runs transformers' offloading schedule through `_compat.offloaded_update` and logs it; placed before an
    instrumented cache."""

    def _kvlab_watch_transfers(self) -> None:
        """Swap in the recording class for layers not seen yet (this runs on every update)."""
        watched = getattr(self, "_kvlab_watched", 0)
        for idx in range(watched, len(self.layers)):
            layer = self.layers[idx]
            if isinstance(layer, _compat.CacheLayerMixin):
                layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470)
                layer.__class__ = _recording_class(layer_type)
                layer.__dict__.update(_kvlab_recorder=self.kvlab_recorder, _kvlab_idx=idx, _kvlab_role=self.kvlab_role)
        self._kvlab_watched = len(self.layers)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        started = self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "kv")
        self._kvlab_watch_transfers()
        out = _compat.offloaded_update(self, key_states, value_states, layer_idx, *args, **kwargs)
        # key_states: (batch, kv_heads, new_tokens, head_dim)
        work = attention_counts(
            key_states, out, layer_heads(self._kvlab_query_heads, layer_idx), self._kvlab_layer_work(layer_idx)
        )
        self._kvlab_record(layer_idx, "kv", key_states.shape[-2], started, work)
        return out
