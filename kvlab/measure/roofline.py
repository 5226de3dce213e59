"""The roofline of decoding: each new token reads every weight and the whole cache once, so
tokens/s can never beat memory bandwidth / (weight bytes + cache bytes). kvlab measures the bandwidth here."""

from __future__ import annotations

import torch

from kvlab.measure.timing import time_interleaved
from kvlab.recording.storage import storage_bytes


def measure_bandwidth(mebibytes: int = 256, repeats: int = 7, device: str = "cpu") -> float:
    """Bytes per second of a large tensor copy (each byte read once and written once), median of `repeats`."""
    source = torch.ones(mebibytes * 2**20 // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)

    def copy():
        target.copy_(source)
        if device != "cpu":
            torch.cuda.synchronize()

    timing = time_interleaved({"copy": copy}, repeats=repeats, warmup=1)["copy"]  # the warm-up pages both buffers in
    return 2 * source.numel() * 4 / timing.median


def weight_bytes(model) -> int:
    """Bytes of the model's parameters and buffers, tied weights counted once."""
    return storage_bytes(*model.parameters(), *model.buffers())


def roofline_tokens_per_s(bandwidth: float, weights: int, cache_bytes: float) -> float:
    return bandwidth / (weights + cache_bytes)


def mean_decode_cache_bytes(trace) -> float:
    """Cache bytes a decode step reads, averaged over the decode steps (the cache grows while decoding)."""
    steps = trace.bytes_by_step()
    decode = steps[:-1] if len(steps) > 1 else steps  # step s reads what steps before it stored
    return sum(decode) / len(decode) if decode else 0.0
