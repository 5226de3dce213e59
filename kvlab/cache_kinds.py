"""The cache kinds kvlab builds and the names of their options: one definition, imported by everything else.

This module imports nothing, so the command line's parser (`kvlab run --help`) and `kvlab size` read the same
names as `make_cache` and the option checks without paying for torch or transformers.
"""

from __future__ import annotations

# Every value of `cache_kind` (`kvlab.run(cache=...)`, `make_cache`, `kvlab run --cache`): "none" disables the
# cache; the others are the names of transformers' `cache_implementation`.
CACHE_KINDS = ("none", "dynamic", "static", "offloaded", "offloaded_static", "quantized")
# The group-wise options of a quantized cache (transformers' QuantizedLayer), beside its `backend`.
QUANTIZED_OPTIONS = ("nbits", "axis_key", "axis_value", "q_group_size", "residual_length")
# The options each kind takes (any other is refused by `kvlab.caches.options.check_options`).
KIND_OPTIONS = {
    "none": (),
    "dynamic": (),
    "static": ("max_cache_len",),
    "offloaded": ("offload_only_non_sliding",),
    "offloaded_static": ("max_cache_len", "offload_only_non_sliding"),
    "quantized": ("backend", *QUANTIZED_OPTIONS),
}
# Every option name, in the order the command line and the explorer show them.
OPTION_NAMES = ("backend", *QUANTIZED_OPTIONS, "max_cache_len", "offload_only_non_sliding")
# The backend a quantized cache uses when none is given (transformers' QuantizedCache default).
DEFAULT_QUANTIZED_BACKEND = "quanto"
