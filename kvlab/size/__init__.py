"""`kvlab size`: the KV-cache bytes of every cache kind for an architecture, from its config alone.

from kvlab.size import architecture, cache_size
cache_size(architecture("llama-2-7b"), "dynamic", tokens=4096, dtype="float16").bytes   # 2 GiB
"""

from kvlab.names import DTYPE_BYTES
from kvlab.size.architecture import (
    Architecture,
    NoKVCacheError,
    UnknownArchitectureError,
    architecture,
    from_config,
    from_config_file,
    from_model_type,
    known_architectures,
)
from kvlab.size.calculator import SIZE_KINDS, CacheSize, cache_size
from kvlab.size.table import format_rows, position_notes, size_rows

__all__ = [
    "Architecture",
    "CacheSize",
    "DTYPE_BYTES",
    "NoKVCacheError",
    "SIZE_KINDS",
    "UnknownArchitectureError",
    "architecture",
    "cache_size",
    "format_rows",
    "from_config",
    "from_config_file",
    "from_model_type",
    "known_architectures",
    "position_notes",
    "size_rows",
]
