"""The cache kinds kvlab builds and the names of their options: one definition, imported by everything else.

This module imports nothing, so the command line's parser (`kvlab run --help`) and `kvlab size` read the same
names as `make_cache` and the option checks without paying for torch or transformers.
"""

from __future__ import annotations

# Every value of `cache_kind` that `generate` builds (`kvlab.run(cache=...)`, `make_cache`, `kvlab run --cache`):
# "none" disables the cache; the others are the names of transformers' `cache_implementation`.
CACHE_KINDS = ("none", "dynamic", "static", "offloaded", "offloaded_static", "quantized")
# Continuous batching's kind: `model.generate_batch(...)` builds its PagedAttentionCache inside its manager (one
# pool of blocks for many requests), so `generate` cannot take it; kvlab records it inside `kvlab.watch(model)`,
# the explorer and `kvlab.serving` run it, and `check_options` refuses it, naming `generate_batch`.
PAGED = "paged"
BATCH_KINDS = (PAGED,)
# The group-wise options of a quantized cache (transformers' QuantizedLayer), beside its `backend`.
QUANTIZED_OPTIONS = ("nbits", "axis_key", "axis_value", "q_group_size", "residual_length")
# The paged kind's options: token slots per block, the requests served, the pool's size in blocks (0: room for
# every request at its final length, so nobody waits).
PAGED_OPTIONS = ("page_size", "requests", "num_blocks")
# The options each kind takes (any other is refused by `kvlab.caches.options.check_options` and, for the paged
# kind, `check_paged_options`).
KIND_OPTIONS = {
    "none": (),
    "dynamic": (),
    "static": ("max_cache_len",),
    "offloaded": ("offload_only_non_sliding",),
    "offloaded_static": ("max_cache_len", "offload_only_non_sliding"),
    "quantized": ("backend", *QUANTIZED_OPTIONS),
    PAGED: PAGED_OPTIONS,
}
# Every option name of the kinds `generate` builds, in the order the command line and the explorer show them.
OPTION_NAMES = ("backend", *QUANTIZED_OPTIONS, "max_cache_len", "offload_only_non_sliding")
# The backend a quantized cache uses when none is given (transformers' QuantizedCache default).
DEFAULT_QUANTIZED_BACKEND = "quanto"
# The page sizes the paged kind takes (token slots per block), and its defaults.
PAGE_SIZES = (4, 8, 16, 32, 64, 128, 256)
PAGED_DEFAULTS = {"page_size": 16, "requests": 4, "num_blocks": 0}
