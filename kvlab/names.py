"""How kvlab names a model and a dtype in traces, tables and the explorer: one spelling everywhere, no torch."""

from __future__ import annotations

# Every dtype kvlab sizes, with the bytes of one element (float8: transformers' fp8 quantized cache, one byte).
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1}
DTYPES = tuple(DTYPE_BYTES)
# The dtypes kvlab loads a model in: float32, the reference for quality, and bfloat16, fast on AVX512-BF16 CPUs.
LOAD_DTYPES = ("float32", "bfloat16")
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16"}


def model_name(model) -> str:
    """The name `kvlab.load` gave a model ("smollm2", a path, a hub id), else its model type."""
    return getattr(model, "kvlab_name", model.config.model_type)


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")
