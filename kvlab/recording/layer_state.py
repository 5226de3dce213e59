"""What one cache layer holds right now, read from transformers' own layer objects.

Slots are token positions along the sequence axis of the stored tensors:
- *allocated*: positions the layer has storage for (a StaticLayer allocates `max_cache_len` up front);
- *live*: positions that hold a token the next query may attend to;
- *masked*: allocated but not valid to attend, the waste a static cache pays for its fixed shape;
- *evicted*: tokens the layer has seen but dropped (a sliding window that moved on).
The trace records them as `slots_allocated`, `slots_live`, `slots_masked` and `tokens_evicted`; `bytes_held` is the
storage the layer keeps alive. `layer_kind` is the layer's kind; the cache's kind (dynamic, static...) is a
`cache_kind`, and an event's type is its `type`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.recording.layer_kinds import KIND_BY_LAYER_TYPE, layer_kinds  # noqa: F401 - re-exported
from kvlab.recording.storage import kv_storage_bytes, storage_bytes


@dataclass  # not frozen: a frozen dataclass's __init__ is several times slower, and this runs per layer per step
class LayerState:
    layer_kind: str  # "full" | "sliding" | "chunked" | "linear" | "dummy"
    logical_length: int  # tokens this layer has seen (its position count)
    slots_allocated: int
    slots_live: int
    slots_masked: int
    tokens_evicted: int
    bytes_held: int
    device: str
    quantized_tokens: int = 0
    residual_tokens: int = 0
    packed_bytes: int = 0
    residual_bytes: int = 0

    def as_dict(self) -> dict:
        return dict(vars(self))  # flat fields: a shallow copy (dataclasses.asdict deep-copies, 5x slower)


def _seq_slots(tensor) -> int:
    # (batch, kv_heads, seq, head_dim)
    if not isinstance(tensor, torch.Tensor) or tensor.dim() < 3:
        return 0
    return int(tensor.shape[-2])


def _device(layer) -> str:
    for tensor in (getattr(layer, "keys", None), *_compat.linear_states(layer)):
        if isinstance(tensor, torch.Tensor):
            return str(tensor.device)
    return "none"


def _read_dummy(layer, layer_kind: str) -> LayerState:
    return LayerState("dummy", 0, 0, 0, 0, 0, 0, "none")


def _read_linear(layer, layer_kind: str) -> LayerState:
    return LayerState("linear", 0, 0, 0, 0, 0, storage_bytes(*_compat.linear_states(layer)), _device(layer))


def _empty(layer_kind: str) -> LayerState:
    return LayerState(layer_kind, 0, 0, 0, 0, 0, 0, "none")


def _read_quantized(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return _empty(layer_kind)
    length = int(layer.get_seq_length())
    packed = storage_bytes(*_compat.quantized_payload(layer))
    residual_tokens = _seq_slots(layer.keys)
    residual = kv_storage_bytes(layer.keys, layer.values)
    return LayerState(
        layer_kind,
        length,
        length,
        length,
        0,
        0,
        packed + residual,
        str(layer.keys.device),
        quantized_tokens=length - residual_tokens if isinstance(layer, _compat.QuantizedLayer) else length,
        residual_tokens=residual_tokens,
        packed_bytes=packed,
        residual_bytes=residual,
    )


def _read_static_sliding(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return _empty(layer_kind)
    seen = _compat.static_sliding_length(layer)
    allocated = int(layer.max_cache_len)
    live = min(seen, allocated)
    return LayerState(
        layer_kind,
        seen,
        allocated,
        live,
        allocated - live,
        seen - live,
        kv_storage_bytes(layer.keys, layer.values),
        str(layer.keys.device),
    )


def _read_static(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return _empty(layer_kind)
    length = int(layer.get_seq_length())
    allocated = int(layer.max_cache_len)
    return LayerState(
        layer_kind,
        length,
        allocated,
        length,
        allocated - length,
        0,
        kv_storage_bytes(layer.keys, layer.values),
        str(layer.keys.device),
    )


def _read_dynamic(layer, layer_kind: str) -> LayerState:
    """Dynamic layers, sliding or not: what is stored is what is attended."""
    if not layer.is_initialized:
        return _empty(layer_kind)
    length = int(layer.get_seq_length())
    allocated = _seq_slots(layer.keys)
    return LayerState(
        layer_kind,
        length,
        allocated,
        allocated,
        0,
        max(length - allocated, 0),
        kv_storage_bytes(layer.keys, layer.values),
        str(layer.keys.device),
    )


@functools.cache
def _reader_for(layer_type: type):
    """The reader of a layer class, decided once per class (isinstance on transformers' ABCs is slow, and this
    runs for every layer at every step)."""
    if issubclass(layer_type, _compat.DummyLayer):
        return _read_dummy
    if issubclass(layer_type, _compat.LinearAttentionCacheLayerMixin) and not issubclass(
        layer_type, _compat.CacheLayerMixin
    ):
        return _read_linear
    if issubclass(layer_type, _compat.BaseQuantizedLayer):
        return _read_quantized
    if issubclass(layer_type, _compat.StaticSlidingWindowLayer):
        return _read_static_sliding
    if issubclass(layer_type, _compat.StaticLayer):
        return _read_static
    return _read_dynamic


def read_layer(layer, layer_kind: str) -> LayerState:
    """Snapshot `layer`. `layer_kind` comes from the config ("sliding" vs "chunked" only differ in the mask)."""
    layer_type: type = type(layer)  # a plain `type`, which mypy knows is hashable (python/mypy#11470)
    return _reader_for(layer_type)(layer, layer_kind)
