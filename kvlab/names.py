"""How kvlab names a model and a dtype in traces, tables and the explorer: one spelling everywhere.

No torch here: both read attributes of objects the caller already has, and the dtype names below are what the
command line offers before anything heavy is imported.
"""

from __future__ import annotations

# Every dtype kvlab names, with the bytes of one element: what the size calculator sizes and `kvlab size --dtype`
# offers (float8: transformers' fp8 quantized cache stores one byte per number).
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1}
DTYPES = tuple(DTYPE_BYTES)
# The dtypes kvlab loads a model in (`kvlab.load`, the explorer): float32, the reference for quality, and bfloat16,
# the fast one on CPUs with AVX512-BF16; `kvlab.load` also takes their short spellings.
LOAD_DTYPES = ("float32", "bfloat16")
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16"}


def model_name(model) -> str:
    """The name `kvlab.load` gave a model ("smollm2", a path, a hub id), else its config's model type."""
    return getattr(model, "kvlab_name", model.config.model_type)


def dtype_name(dtype) -> str:
    """A torch dtype without its module prefix: torch.float32 -> "float32"."""
    return str(dtype).replace("torch.", "")
