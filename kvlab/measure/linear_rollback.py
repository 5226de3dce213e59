"""Rolling a linear-attention layer back (transformers 5.25): `activate_past_recording(recurrent_states_to_keep=N)`
makes each such layer keep a copy of its recurrent state before every token, and `crop(-n)` puts back the one from n
tokens earlier. Whether the state put back is the right one is a comparison with a run stopped n tokens earlier;
what the recording costs is the bytes of those copies, which the trace counts as held."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.recording.storage import storage_bytes
from kvlab.recording.trace import Trace


@dataclass(frozen=True)
class StateMatch:
    equal: bool  # bit for bit
    max_abs_difference: float


def state_match(restored: torch.Tensor, expected: torch.Tensor) -> StateMatch:
    difference = (restored.float() - expected.float()).abs().max().item() if restored.numel() else 0.0
    return StateMatch(bool(torch.equal(restored, expected)), difference)


def recorded_bytes(cache) -> int:
    """Bytes of the recurrent states the cache's linear-attention layers keep to roll back, each storage once."""
    return storage_bytes(*[state for layer in cache.layers for state in _compat.recorded_states(layer)])


def bytes_around_last_crop(trace: Trace) -> tuple[int, int]:
    """The bytes the cache held (every layer, as the trace counts them) just before its last crop and after it."""
    last_crop = max(i for i, event in enumerate(trace.events) if event["type"] == "crop")
    before = [e["cache_bytes"] for e in trace.events[:last_crop] if e["type"] == "update"]
    after = [e["cache_bytes"] for e in trace.events[last_crop:] if e["type"] == "update"]
    return before[-1], after[-1] if after else before[-1]
