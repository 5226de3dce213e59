"""The paged layout of continuous batching (`model.generate_batch`), as arithmetic: one pool of blocks of
`page_size` token slots; a request holding `n` tokens occupies ceil(n / page_size) blocks, so it wastes under one
block (only its last is partly empty), whatever the other requests do. Its live trace: `kvlab.caches.paged`.
"""

from __future__ import annotations

from kvlab.caches.options import check_page_size, check_paged_layers, paged_blocks
from kvlab.i18n import _
from kvlab.recording.slots import waste_pct
from kvlab.size.architecture import Architecture
from kvlab.size.calculator import cache_size

# transformers 5.24's ContinuousBatchingConfig.page_size default
DEFAULT_PAGE_SIZE = 256


def paged_row(
    arch: Architecture, lengths: list[int], page_size: int = DEFAULT_PAGE_SIZE, dtype: str = "float32"
) -> dict:
    """A `kvlab size` row for requests that hold `lengths` tokens each, in blocks of `page_size` slots."""
    check_paged_layers(arch.layer_kinds, arch.name)
    check_page_size(page_size)
    if not lengths or min(lengths) < 1:
        raise ValueError(_("every request must hold at least one token; got lengths {lengths}").format(lengths=lengths))
    per_token = cache_size(arch, "dynamic", 1, dtype=dtype).bytes  # keys and values of every layer
    blocks = sum(paged_blocks(n, page_size) for n in lengths)
    reserved, live = blocks * page_size, sum(lengths)
    return {
        "label": f"paged (page_size {page_size})",
        "cache_kind": "paged",
        "options": {"page_size": page_size},
        "tokens": live,
        "prefill": live,
        "batch": len(lengths),
        "dtype": dtype,
        "bytes": reserved * per_token,
        "peak_bytes": reserved * per_token,
        "slots_live": live,
        "slots_stored": reserved,
        "blocks": blocks,
        "packed_bytes": 0,
        "residual_bytes": 0,
        "by_layer_kind": {"full": reserved * per_token},
        "cross_bytes": 0,
        "bytes_per_token": reserved * per_token / live,
        "waste_bytes": (reserved - live) * per_token,
        "fragmentation_pct": waste_pct(reserved - live, reserved),
        "note": f"{blocks} blocks of {page_size} slots for {len(lengths)} requests of {live:,} tokens in all",
    }
