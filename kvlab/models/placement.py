"""Where and in which dtype a model loads: the dtype and device names kvlab accepts, checked against this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.i18n import _
from kvlab.names import DTYPE_ALIASES, LOAD_DTYPES

if TYPE_CHECKING:
    import torch


def parse_dtype(dtype) -> torch.dtype:
    """float32 is the clean reference for quality; bfloat16 decodes ~1.75-2x faster on CPUs with AVX512-BF16
    (greedy fp32 and bf16 outputs diverge after 5-15 tokens)."""
    import torch

    names = {name: name for name in LOAD_DTYPES} | DTYPE_ALIASES  # the dtypes kvlab loads a model in, and aliases
    dtypes = {name: getattr(torch, dtype) for name, dtype in names.items()}
    if isinstance(dtype, torch.dtype):
        if dtype in dtypes.values():
            return dtype
    elif isinstance(dtype, str) and dtype in dtypes:
        return dtypes[dtype]
    raise ValueError(_("unsupported dtype {dtype!r}; valid: {valid}").format(dtype=dtype, valid=", ".join(LOAD_DTYPES)))


def parse_device(device=None) -> torch.device:
    """A device this machine has. None picks the accelerator when there is one (cuda, then mps), else the CPU."""
    import torch

    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    valid = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())] + (["mps"] if mps else [])
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            _("unknown device {device!r}; valid here: {valid}").format(device=device, valid=", ".join(valid))
        ) from None
    if parsed.type in ("cpu", "meta"):
        return parsed
    backend = getattr(torch, parsed.type, None)
    available = backend is not None and hasattr(backend, "is_available") and backend.is_available()
    if parsed.type == "mps":
        available = mps
    count = backend.device_count() if available and hasattr(backend, "device_count") else 1
    if not available or (parsed.index is not None and parsed.index >= count):
        raise ValueError(
            _("device {device!r} is not available here; valid here: {valid}").format(
                device=device, valid=", ".join(valid)
            )
        )
    return parsed
