"""The textbook KV-cache size: 2 (keys and values) × layers × kv_heads × head_dim × bytes per element × tokens.

Set next to the bytes kvlab measures, it shows where the formula holds (full layers) and where reality differs
(sliding layers stop at their window; quantized caches pack; static caches allocate up front).
"""

from __future__ import annotations

import torch

from kvlab.recording.layer_state import layer_kinds


def _attention_shape(config) -> tuple[int, int]:
    text = config.get_text_config(decoder=True)
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return int(heads), int(head_dim)


def bytes_per_token_per_layer(config, dtype: torch.dtype = torch.float32) -> int:
    """Keys plus values of one token in one attention layer: 2 × kv_heads × head_dim × element size."""
    heads, head_dim = _attention_shape(config)
    return 2 * heads * head_dim * torch.empty((), dtype=dtype).element_size()


def kv_bytes_per_token(config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes one more token adds to a cache that keeps every token in every attention layer."""
    attention_layers = sum(1 for k in layer_kinds(config) if k in ("full", "sliding", "chunked"))
    return attention_layers * bytes_per_token_per_layer(config, dtype)


def kv_bytes(config, tokens: int, dtype: torch.dtype = torch.float32, window: int | None = None) -> int:
    """Formula bytes after `tokens` tokens, with sliding/chunked layers capped at `window` tokens
    (the config's `sliding_window` when not given)."""
    window = window or getattr(config.get_text_config(decoder=True), "sliding_window", None) or tokens
    per_layer = bytes_per_token_per_layer(config, dtype)
    total = 0
    for layer_kind in layer_kinds(config):
        if layer_kind == "full":
            total += tokens * per_layer
        elif layer_kind in ("sliding", "chunked"):
            total += min(tokens, window) * per_layer
    return total


def kv_bytes_by_layer_kind(config, tokens: int, dtype: torch.dtype = torch.float32, window: int | None = None) -> dict:
    """`kv_bytes` split by layer kind: {"full": bytes, "sliding": bytes, ...} (attention kinds only)."""
    window = window or getattr(config.get_text_config(decoder=True), "sliding_window", None) or tokens
    per_layer = bytes_per_token_per_layer(config, dtype)
    totals: dict[str, int] = {}
    for layer_kind in layer_kinds(config):
        if layer_kind in ("full", "sliding", "chunked"):
            held = tokens if layer_kind == "full" else min(tokens, window)
            totals[layer_kind] = totals.get(layer_kind, 0) + held * per_layer
    return totals


def expected_curves(config, max_tokens: int, dtype: torch.dtype = torch.float32, points: int = 200) -> dict:
    """{layer kind: [(tokens, formula bytes)]} from 0 to `max_tokens`, plus "total": the shapes to expect on a
    plot."""
    steps = sorted({round(i * max_tokens / points) for i in range(points + 1)})
    window = getattr(config.get_text_config(decoder=True), "sliding_window", None)
    if window and window <= max_tokens:
        steps = sorted(set(steps) | {window})  # the knee of the sliding curve
    curves: dict[str, list[tuple[int, int]]] = {}
    for t in steps:
        by_layer_kind = kv_bytes_by_layer_kind(config, t, dtype)
        for layer_kind, value in {**by_layer_kind, "total": sum(by_layer_kind.values())}.items():
            curves.setdefault(layer_kind, []).append((t, value))
    return curves
