"""Bytes of one quantized tensor, as the backends really store it (packed payload + scales), checked against live
caches to the byte (tests/size/test_calculator.py):
- quanto groups a (batch, kv_heads, seq, head_dim) tensor into G = numel / group rows of `group` values
  (axis 0: shape (G, group); axis -1: (group, G)), packs 8 / nbits values per uint8 along the first dim
  (rounding up), and keeps one scale and one shift per group in the compute dtype.
- hqq reshapes to (group, G) for axis 0 or (G, group) for axis 1 and packs along the first dim: 8 / nbits values
  per uint8 for 1, 2, 4, 8 bits; 3 bits go 10 to an int32 word, padded up to a multiple of 10; one scale and one
  zero per group. At axis 1 kvlab pads the sequence first (`kvlab.caches.hqq_packing.hqq_sequence_padding`).
- fp8 stores one byte per value and one float32 scale per tensor.
Each backend's row (`kvlab.quantized_backends`) names its layout, counted by `LAYOUT_BYTES` below, and holds its numbers
(values per word, bytes per word, the scale of a per-tensor layout).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kvlab.caches.hqq_packing import hqq_sequence_padding
from kvlab.caches.options import CacheOptionError, check_backend
from kvlab.i18n import _
from kvlab.quantized_backends import QuantizedBackend

Shape = tuple[int, int, int, int]  # (batch, kv_heads, seq, head_dim)


def quanto_bytes(row: QuantizedBackend, shape: Shape, nbits: int, axis: int, group: int, elem: int) -> int:
    """Packed data + scale + shift of one quanto-quantized (batch, kv_heads, seq, head_dim) tensor."""
    numel = math.prod(shape)
    axis_dim = shape[0] if axis == 0 else shape[-1]
    axis_numel = numel // axis_dim
    if group > axis_numel or axis_numel % group:
        raise CacheOptionError(
            _(
                "quanto cannot quantize a {shape} tensor along axis {axis} with q_group_size={group}: "
                "Group size ({group}) must be a divisor of ({divided})"
            ).format(shape=tuple(shape), axis=axis, group=group, divided=axis_numel)
        )
    groups = numel // group
    per_word, word_bytes = row.words[nbits]
    words = math.ceil(groups / per_word) * group if axis == 0 else math.ceil(group / per_word) * groups
    return words * word_bytes + 2 * groups * elem


def hqq_bytes(row: QuantizedBackend, shape: Shape, nbits: int, axis: int, group: int, elem: int) -> int:
    """Packed data + scale + zero of one hqq-quantized tensor, after kvlab's sequence padding for axis 1."""
    batch, heads, seq, dim = shape
    if axis == 1:
        seq += hqq_sequence_padding(tuple(shape), group, nbits, axis)
    numel = batch * heads * seq * dim
    if numel % group:
        raise CacheOptionError(
            _("hqq needs q_group_size ({group}) to divide the tensor size ({numel})").format(group=group, numel=numel)
        )
    groups = numel // group
    rows, cols = (group, groups) if axis == 0 else (groups, group)  # hqq packs along `rows`
    per_word, word_bytes = row.words[nbits]
    if nbits not in row.self_padding and rows % per_word:
        raise CacheOptionError(
            _("hqq {nbits}-bit cannot pack {rows} rows (needs a multiple of {multiple})").format(
                nbits=nbits, rows=rows, multiple=per_word
            )
        )
    return math.ceil(rows / per_word) * cols * word_bytes + 2 * groups * elem


def per_tensor_bytes(row: QuantizedBackend, shape: Shape, *_group) -> int:
    """Every value in `value_bytes`, and the tensor's one scale."""
    return math.prod(shape) * row.value_bytes + row.scale_bytes


# How each layout of `kvlab.quantized_backends.LAYOUTS` is counted.
LAYOUT_BYTES: dict[str, Callable[..., int]] = {"hqq": hqq_bytes, "quanto": quanto_bytes, "per_tensor": per_tensor_bytes}


def packed_bytes(backend: str, shape, nbits: int, axis: int, group: int, elem: int) -> int:
    """Bytes of one quantized keys-or-values tensor of `shape` for `backend`, counted by its row's layout."""
    if shape[2] == 0:
        return 0
    row = check_backend(backend)
    return LAYOUT_BYTES[row.layout](row, shape, nbits, axis, group, elem)
