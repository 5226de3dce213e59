"""How hqq packs a cache tensor, as arithmetic (no torch: `kvlab size` counts packed bytes of unloaded models)."""

from __future__ import annotations

from kvlab.i18n import _
from kvlab.quantized_backends import BACKENDS_BY_NAME

HQQ = BACKENDS_BY_NAME["hqq"]  # hqq's own row: its words per width


def hqq_sequence_padding(shape: tuple[int, ...], q_group_size: int, nbits: int, axis: int) -> int:
    """Zero tokens to append along the sequence axis so hqq can quantize a (batch, heads, seq, dim) tensor.

    hqq needs the element count to divide by `q_group_size`, and at `axis=1` its packed axis (the
    `numel / q_group_size` rows) to divide by the pack factor (4 values per byte at 2 bits, 2 at 4 bits...).
    """
    batch, heads, seq, dim = shape
    factor = HQQ.words[nbits][0] if axis == 1 else 1  # at axis 0 the packed axis is the group
    for pad in range(0, q_group_size * factor + 1):
        numel = batch * heads * (seq + pad) * dim
        if numel % q_group_size == 0 and (numel // q_group_size) % factor == 0:
            return pad
    raise ValueError(
        _("hqq cannot pack a {shape} tensor with q_group_size={q_group_size} at {nbits} bits").format(
            shape=shape, q_group_size=q_group_size, nbits=nbits
        )
    )


def hqq_needs_flatten(nbits: int, axis: int) -> bool:
    """hqq's 3-bit unpacking reads `shape[0] * shape[1]` as its row count, right only for 2-D tensors."""
    return nbits == 3 and axis == 1
