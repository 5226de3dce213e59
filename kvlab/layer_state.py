"""What one cache layer holds right now, read from transformers' own layer objects.

Slots are token positions along the sequence axis of the stored tensors:
- *allocated*: positions the layer has storage for (a StaticLayer allocates `max_cache_len` up front);
- *live*: positions that hold a token the next query may attend to;
- *masked*: allocated but not valid to attend, the waste a static cache pays for its fixed shape;
- *evicted*: tokens the layer has seen but dropped (a sliding window that moved on).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from kvlab import _compat
from kvlab.storage import storage_bytes


@dataclass(frozen=True)
class LayerState:
    kind: str  # "full" | "sliding" | "chunked" | "linear" | "dummy"
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
        return asdict(self)


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


def read_layer(layer, kind: str) -> LayerState:
    """Snapshot `layer`. `kind` comes from the config ("sliding" vs "chunked" only differ in the mask)."""
    if isinstance(layer, _compat.DummyLayer):
        return LayerState("dummy", 0, 0, 0, 0, 0, 0, "none")
    if _compat.is_linear_layer(layer):
        return LayerState("linear", 0, 0, 0, 0, 0, storage_bytes(*_compat.linear_states(layer)), _device(layer))
    if not layer.is_initialized:
        return LayerState(kind, 0, 0, 0, 0, 0, 0, "none")

    length = int(layer.get_seq_length())
    device = _device(layer)
    if isinstance(layer, _compat.BaseQuantizedLayer):
        packed = storage_bytes(*_compat.quantized_payload(layer))
        residual_tokens = _seq_slots(layer.keys)
        residual = storage_bytes(layer.keys, layer.values)
        return LayerState(
            kind, length, length, length, 0, 0, packed + residual, device,
            quantized_tokens=length - residual_tokens if isinstance(layer, _compat.QuantizedLayer) else length,
            residual_tokens=residual_tokens, packed_bytes=packed, residual_bytes=residual,
        )  # fmt: skip
    if isinstance(layer, _compat.StaticSlidingWindowLayer):
        seen = _compat.static_sliding_length(layer)
        allocated = int(layer.max_cache_len)
        live = min(seen, allocated)
        return LayerState(kind, seen, allocated, live, allocated - live, seen - live,
                          storage_bytes(layer.keys, layer.values), device)  # fmt: skip
    if isinstance(layer, _compat.StaticLayer):
        allocated = int(layer.max_cache_len)
        return LayerState(kind, length, allocated, length, allocated - length, 0,
                          storage_bytes(layer.keys, layer.values), device)  # fmt: skip
    # Dynamic layers, sliding or not: what is stored is what is attended.
    held = _seq_slots(layer.keys)
    return LayerState(kind, length, held, held, 0, max(length - held, 0),
                      storage_bytes(layer.keys, layer.values), device)  # fmt: skip


KIND_BY_LAYER_TYPE = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "conv": "linear",
    "hybrid": "full",
    "hybrid_sliding": "sliding",
    "dummy": "dummy",
}


def layer_kinds(config, num_layers: int | None = None) -> list[str]:
    """kvlab's layer kind for each layer of a model config."""
    kinds = [KIND_BY_LAYER_TYPE.get(t, "full") for t in _compat.layer_types(config)]
    return kinds if num_layers is None else (kinds + ["full"] * num_layers)[:num_layers]
