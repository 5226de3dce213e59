"""QuantizedCache, instrumented: KIVI-style packed storage plus a full-precision residual window.

Two guards where transformers 5.24 fails:
- hqq packs several values per byte along the first axis of its reshaped tensor, and with `axis=1` that axis
  has `batch * kv_heads * seq * head_dim / q_group_size` rows: 2-bit crashes unless it divides by 4, 4-bit on
  odd counts (`The size of tensor a (79) must match the size of tensor b (81)`). The guide's own 5-token
  prompt fails at 4 bits. `PaddedHQQQuantizedLayer` pads the sequence with zero tokens up to the next length
  that packs, and drops them again on dequantization. Lengths that already pack take transformers' path.
- `crop` on a quantized layer only shortens the residual while `get_seq_length` keeps counting the cropped
  tokens. kvlab crops the residual *and* the length, and refuses to cut into tokens already quantized.
"""

from __future__ import annotations

import functools

import torch

from kvlab import _compat
from kvlab.caches.base import InstrumentedCacheMixin
from kvlab.caches.crop_rules import check_quantized_residual
from kvlab.caches.hqq_packing import hqq_needs_flatten, hqq_sequence_padding
from kvlab.caches.options import check_quantized_options
from kvlab.recording.work import QUANT_FIELDS


class PaddedHQQQuantizedLayer(_compat.HQQQuantizedLayer):
    """HQQQuantizedLayer that quantizes every length (see module docstring).

    Two fixes, each applied only where transformers' path fails, so every other case is bit-identical to it:
    the sequence is padded until hqq's packed axis divides by its pack factor, and at 3 bits on axis 1 the
    tensor is handed to hqq as 2-D (hqq's 3-bit unpacking reads `shape[0] * shape[1]` as the row count, which
    is only right for 2-D weights). Flattening keeps hqq's grouping: it reshapes the flat order either way.
    """

    def _quantize(self, tensor, axis):
        # tensor: (batch, kv_heads, seq, head_dim)
        pad = hqq_sequence_padding(tuple(tensor.shape), self.q_group_size, self.nbits, axis)
        flatten = hqq_needs_flatten(self.nbits, axis)
        if pad == 0 and not flatten:
            return super()._quantize(tensor, axis)
        padded = torch.nn.functional.pad(tensor, (0, 0, 0, pad))  # (batch, kv_heads, seq + pad, head_dim)
        to_quantize = padded.reshape(-1, padded.shape[-1]) if flatten else padded  # (rows, head_dim) when flat
        qtensor, meta = super()._quantize(to_quantize.contiguous(), axis)
        meta["kvlab_seq_len"], meta["kvlab_shape"] = tensor.shape[-2], tuple(padded.shape)
        return qtensor, meta

    def _dequantize(self, qtensor):
        tensor = super()._dequantize(qtensor)
        meta = qtensor[1]
        if "kvlab_shape" not in meta:
            return tensor
        return tensor.reshape(meta["kvlab_shape"])[:, :, : meta["kvlab_seq_len"], :]


@functools.cache
def _counting_class(layer_class: type) -> type:
    """A subclass of `layer_class` that counts its `_quantize` / `_dequantize` calls and their elements.

    Single inheritance with no new state (the counts live in the instance's `__dict__`), so an existing layer's
    `__class__` can be swapped in place and back; the calls go to the layer's own methods untouched.
    """

    def _quantize(self, tensor, *args, **kwargs):
        counts = self.__dict__.setdefault("_kvlab_quant_work", [0, 0, 0, 0])
        counts[0] += 1
        counts[1] += int(tensor.numel())  # tensor: (batch, kv_heads, seq, head_dim)
        return layer_class._quantize(self, tensor, *args, **kwargs)

    def _dequantize(self, qtensor, *args, **kwargs):
        tensor = layer_class._dequantize(self, qtensor, *args, **kwargs)
        counts = self.__dict__.setdefault("_kvlab_quant_work", [0, 0, 0, 0])
        counts[2] += 1
        counts[3] += int(tensor.numel())
        return tensor

    methods = {"_quantize": _quantize, "_dequantize": _dequantize, "kvlab_counted_class": layer_class}
    return type(f"Counting{layer_class.__name__}", (layer_class,), methods)


class InstrumentedQuantizedCache(InstrumentedCacheMixin, _compat.QuantizedCache):
    """`transformers.QuantizedCache` (backends hqq, quanto, fp8) recording packed and residual bytes."""

    def __init__(self, backend: str, config, *args, trace=None, recorder=None, role: str = "self", **kwargs):
        check_quantized_options(backend, config, **kwargs)
        super().__init__(backend, config, *args, **kwargs)
        self.backend = backend
        self._kvlab_adopt_layers()
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)

    def _kvlab_adopt_layers(self) -> None:
        """Every layer counts its packing calls; hqq layers also become `PaddedHQQQuantizedLayer`. Both classes
        add no state, so they are switched in place (and back by `_kvlab_release_layers`)."""
        for layer in self.layers:
            if self.backend == "hqq" and type(layer) is _compat.HQQQuantizedLayer:
                layer.__class__ = PaddedHQQQuantizedLayer
            if not hasattr(type(layer), "kvlab_counted_class"):
                layer.__class__ = _counting_class(type(layer))

    def _kvlab_release_layers(self) -> None:
        """Undo `_kvlab_adopt_layers` (used when `kvlab.watch` gives a cache back)."""
        for layer in self.layers:
            layer.__class__ = getattr(type(layer), "kvlab_counted_class", type(layer))
            layer.__dict__.pop("_kvlab_quant_work", None)
            if type(layer) is PaddedHQQQuantizedLayer:
                layer.__class__ = _compat.HQQQuantizedLayer

    def _kvlab_layer_work(self, layer_idx: int) -> dict:
        """The packing calls this layer made since its last update event (then the count starts again)."""
        counts = self.layers[layer_idx].__dict__.pop("_kvlab_quant_work", [0, 0, 0, 0])
        return dict(zip(QUANT_FIELDS, counts))

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        residual = min((_compat.quantized_residual_length(layer) for layer in self.layers), default=0)
        check_quantized_residual(tokens_to_remove, self.backend, residual)

    def _kvlab_crop_layers(self, tokens_to_remove: int) -> None:
        for layer in self.layers:
            _compat.crop_quantized_length(layer, tokens_to_remove)  # transformers' crop only shortens the residual
        super()._kvlab_crop_layers(tokens_to_remove)
