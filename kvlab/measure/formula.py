"""The textbook KV-cache size: 2 (keys and values) × layers × kv_heads × head_dim × bytes per element × tokens,
to set next to the bytes kvlab measures (sliding layers stop at their window, static caches allocate up front)."""

from __future__ import annotations

import torch

from kvlab.model_facts import model_facts

ATTENTION_KINDS = ("full", "sliding", "chunked")  # the layer kinds that keep per-token keys and values


def bytes_per_token_per_layer(config, dtype: torch.dtype = torch.float32) -> int:
    """Keys plus values of one token in one attention layer. `config`, here as everywhere, is a config or its
    `ModelFacts`."""
    facts = model_facts(config)
    return 2 * facts.kv_heads * facts.head_dim * torch.empty((), dtype=dtype).element_size()


def kv_bytes_per_token(config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes one more token adds to a cache that keeps every token in every attention layer."""
    return kv_bytes(config, 1, dtype)  # one token: under every window


def kv_bytes(config, tokens: int, dtype: torch.dtype = torch.float32, window: int | None = None) -> int:
    """Formula bytes after `tokens` tokens, sliding/chunked layers capped at `window` (default: the config's)."""
    return sum(kv_bytes_by_layer_kind(config, tokens, dtype, window).values())


def kv_bytes_by_layer_kind(config, tokens: int, dtype: torch.dtype = torch.float32, window: int | None = None) -> dict:
    """`kv_bytes` split by (attention) layer kind."""
    facts = model_facts(config)
    window = window or facts.sliding_window or tokens
    per_layer = bytes_per_token_per_layer(facts, dtype)
    totals: dict[str, int] = {}
    for layer_kind in facts.layer_kinds:
        if layer_kind in ATTENTION_KINDS:
            held = tokens if layer_kind == "full" else min(tokens, window)
            totals[layer_kind] = totals.get(layer_kind, 0) + held * per_layer
    return totals


def expected_curves(config, max_tokens: int, dtype: torch.dtype = torch.float32, points: int = 200) -> dict:
    """{layer kind: [(tokens, formula bytes)]} from 0 to `max_tokens`, plus "total": the shapes to expect on a plot."""
    facts = model_facts(config)  # read once for every point
    steps = sorted({round(i * max_tokens / points) for i in range(points + 1)})
    window = facts.sliding_window
    if window and window <= max_tokens:
        steps = sorted(set(steps) | {window})  # the knee of the sliding curve
    curves: dict[str, list[tuple[int, int]]] = {}
    for t in steps:
        by_layer_kind = kv_bytes_by_layer_kind(facts, t, dtype)
        for layer_kind, value in {**by_layer_kind, "total": sum(by_layer_kind.values())}.items():
            curves.setdefault(layer_kind, []).append((t, value))
    return curves
