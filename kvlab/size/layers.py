"""What one cache layer holds after step `s` of a generation, from facts transformers measured on the meta device.

A generation is a prefill of `prefill` tokens (step 0) followed by one-token decode steps (steps 1, 2, ...), so
the layer has seen `prefill + s` tokens after step s. `LayerFacts` are one layer's measured growth
(`kvlab.size.meta.layer_facts`: the model's own cache filled with meta tensors): elements of the cache dtype per
token and per sequence (keys and values, an MLA latent and its rope key, a conv and recurrent state: whatever the
layer keeps), bytes of other dtypes (bookkeeping tensors such as a static layer's `cumulative_length`), the window
its storage stops at, and the per-token shape of its keys and values (what a quantizer packs).

What is left here is arithmetic on those facts that a single meta run cannot answer for every step count, and is
checked against the meta run wherever both apply (tests/size/test_meta.py):
- a dynamic sliding or chunked layer (window W) keeps a *view* of the last W-1 tokens of `cat(kept, new)`: after
  the prefill the view sits in the whole prefill concatenation (storage = prefill tokens, e.g. 700 on a 512-window
  layer); after a decode step the concatenation is only `kept + 1`, so storage = min(seen-1, W-1) + 1;
- a static layer allocates min(W, max_cache_len) slots at its first update;
- quantized (quanto, hqq): the prefill is quantized whole; decode tokens go to a full-precision residual that is
  flushed (everything re-quantized) when it would reach residual_length, so r = s mod residual_length; fp8
  quantizes every token on arrival (`kvlab.size.packing`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kvlab.size.packing import packed_bytes


@dataclass(frozen=True)
class Growth:
    """bytes(n, batch) = batch * (per_token * n + per_sequence) + fixed, for a layer holding `n` token slots."""

    per_token: int = 0
    per_sequence: int = 0
    fixed: int = 0

    def at(self, tokens: int, batch: int) -> int:
        return batch * (self.per_token * tokens + self.per_sequence) + self.fixed


@dataclass(frozen=True)
class LayerFacts:
    """One cache layer as transformers builds and fills it (`kvlab.size.meta.layer_facts`)."""

    kind: str  # "full" | "sliding" | "chunked" | "linear" | "dummy", or "cross" (an encoder-decoder's cross-attention)
    dynamic_class: str  # the layer class of a DynamicCache (EncoderDecoderCache for "cross")
    static_class: str  # ... of a StaticCache
    elements: Growth  # elements of the cache dtype: bytes = elements x element size
    dynamic_other: Growth  # bytes of tensors in other dtypes (int64 counters), in a DynamicCache
    static_other: Growth  # ... in a StaticCache
    window: int | None = None  # the most token slots the layer keeps (sliding window, attention chunk)
    key_shape: tuple[int, int] | None = None  # (heads, dim) of one token's keys, for quantized packing
    value_shape: tuple[int, int] | None = None

    @property
    def holds_tokens(self) -> bool:
        return self.elements.per_token > 0

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict) -> LayerFacts:
        growths = {k: Growth(**data[k]) for k in ("elements", "dynamic_other", "static_other")}
        shapes = {k: tuple(data[k]) for k in ("key_shape", "value_shape") if data.get(k)}
        rest = {k: v for k, v in data.items() if k not in growths and k not in shapes}
        return cls(**rest, **growths, **shapes)


@dataclass(frozen=True)
class LayerSize:
    bytes: int
    slots_live: int  # token slots the next query may attend
    slots_stored: int  # token slots the storage spans (allocated for static, whole concatenation for sliding views)
    packed_bytes: int = 0
    residual_bytes: int = 0
    residual_tokens: int = 0


def _size(facts: LayerFacts, other: Growth, stored: int, live: int, batch: int, elem: int) -> LayerSize:
    if not facts.holds_tokens:
        stored = live = 0
    held = facts.elements.at(stored, batch) * elem + other.at(stored, batch)
    return LayerSize(held, live, stored)


def dynamic(facts: LayerFacts, prefill: int, step: int, batch: int, elem: int) -> LayerSize:
    """A DynamicCache layer after step `step` (a cross layer: pass the source tokens as `prefill`, step 0)."""
    seen = prefill + step
    if facts.window is None:
        stored = live = seen
    else:
        keep = facts.window - 1  # transformers keeps the last window-1 tokens; the next query makes it window
        stored = prefill if step == 0 else min(seen - 1, keep) + 1
        live = min(seen, keep)
    return _size(facts, facts.dynamic_other, stored, live, batch, elem)


def static(facts: LayerFacts, prefill: int, step: int, max_cache_len: int, batch: int, elem: int) -> LayerSize:
    """A StaticCache layer: its slots are allocated at the first update."""
    allocated = max_cache_len if facts.window is None else min(facts.window, max_cache_len)
    return _size(facts, facts.static_other, allocated, min(prefill + step, allocated), batch, elem)


def quantized(
    facts: LayerFacts,
    prefill: int,
    step: int,
    batch: int,
    elem: int,
    backend: str,
    nbits: int,
    axis_key: int,
    axis_value: int,
    q_group_size: int,
    residual_length: int,
) -> LayerSize:
    """A QuantizedCache layer: packed keys and values (their measured per-token shapes) + the residual."""
    seen = prefill + step
    residual = 0 if backend == "fp8" else step % residual_length
    quantized_tokens = seen - residual
    packed = 0
    for (heads, dim), axis in ((facts.key_shape, axis_key), (facts.value_shape, axis_value)):
        packed += packed_bytes(backend, (batch, heads, quantized_tokens, dim), nbits, axis, q_group_size, elem)
    residual_bytes = batch * residual * facts.elements.per_token * elem
    return LayerSize(packed + residual_bytes, seen, seen, packed, residual_bytes, residual)
