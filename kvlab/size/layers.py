"""What one cache layer holds after step `s` of a generation, in closed form.

A generation is a prefill of `prefill` tokens (step 0) followed by one-token decode steps (steps 1, 2, ...),
so the layer has seen `prefill + s` tokens after step s. Each rule returns a `LayerSize`: the bytes of the
storage the layer keeps alive (what `kvlab.recording.storage.storage_bytes` counts, a trace's `bytes_held`),
the slots it can attend (`slots_live`, as in a trace) and the slots its storage spans (`slots_stored`: a trace's
`slots_allocated`, except that a sliding layer's keys are a view of the last window - 1 slots of a longer
storage, e.g. 511 slots allocated in 700 stored after a 700-token prefill).

The rules transformers 5.24 follows (checked against live caches, to the byte, in tests/size/test_calculator.py):
- dynamic full layer: `torch.cat` per step, so storage = tokens seen.
- dynamic sliding/chunked layer (window W): keeps a *view* of the last W-1 tokens of `cat(kept, new)`. After
  the prefill the view sits in the whole prefill concatenation (storage = prefill tokens, e.g. 700 on a
  512-window layer); after a decode step the concatenation is only `kept + 1`, so storage = min(seen-1, W-1) + 1.
- static layer: allocates max_cache_len slots at the first update (sliding: min(window, max_cache_len)).
- quantized (quanto, hqq): the prefill is quantized whole; decode tokens go to a full-precision residual
  that is flushed (everything re-quantized) when it would reach residual_length, so r = s mod residual_length.
- fp8: every token quantized on arrival, one byte per value, plus a float32 scale per tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.size.packing import packed_bytes


@dataclass(frozen=True)
class LayerSize:
    bytes: int
    slots_live: int  # token slots the next query may attend
    slots_stored: int  # token slots the storage spans (allocated for static, whole concatenation for sliding views)
    packed_bytes: int = 0
    residual_bytes: int = 0
    residual_tokens: int = 0


@dataclass(frozen=True)
class Shape:
    """Per-token geometry of one layer's keys or values: (batch, kv_heads, ·, head_dim) at `elem` bytes."""

    batch: int
    kv_heads: int
    head_dim: int
    elem: int

    def kv_bytes(self, tokens: int) -> int:
        """Keys + values of `tokens` full-precision tokens."""
        return 2 * self.batch * self.kv_heads * tokens * self.head_dim * self.elem

    def tensor(self, tokens: int) -> tuple[int, int, int, int]:
        return (self.batch, self.kv_heads, tokens, self.head_dim)


def dynamic_full(shape: Shape, prefill: int, step: int) -> LayerSize:
    seen = prefill + step
    return LayerSize(shape.kv_bytes(seen), seen, seen)


def dynamic_windowed(shape: Shape, prefill: int, step: int, window: int) -> LayerSize:
    seen = prefill + step
    keep = window - 1  # transformers keeps the last window-1 tokens; the next query makes it window
    stored = prefill if step == 0 else min(seen - 1, keep) + 1
    return LayerSize(shape.kv_bytes(stored), min(seen, keep), stored)


def static(shape: Shape, prefill: int, step: int, max_cache_len: int, window: int | None = None) -> LayerSize:
    allocated = max_cache_len if window is None else min(window, max_cache_len)
    seen = prefill + step
    return LayerSize(shape.kv_bytes(allocated), min(seen, allocated), allocated)


def quantized(
    shape: Shape,
    prefill: int,
    step: int,
    backend: str,
    nbits: int,
    axis_key: int,
    axis_value: int,
    q_group_size: int,
    residual_length: int,
) -> LayerSize:
    seen = prefill + step
    residual = 0 if backend == "fp8" else step % residual_length
    quantized_tokens = seen - residual
    packed = sum(
        packed_bytes(backend, shape.tensor(quantized_tokens), nbits, axis, q_group_size, shape.elem)
        for axis in (axis_key, axis_value)
    )
    residual_bytes = shape.kv_bytes(residual)
    return LayerSize(packed + residual_bytes, seen, seen, packed, residual_bytes, residual)


def linear(batch: int, elem: int, channels: int, conv_kernel: int, state_size: int) -> LayerSize:
    """A Mamba-style layer: conv state (batch, channels, conv_kernel) + SSM state (batch, channels, state_size)."""
    return LayerSize(batch * channels * (conv_kernel + state_size) * elem, 0, 0)
