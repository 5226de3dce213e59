"""What one cache layer holds after step `s` of a generation (a prefill, step 0, then one-token decode steps),
from the facts transformers measured on the meta device (`kvlab.size.meta.layer_facts`).

What is left here is arithmetic a single meta run cannot answer for every step count (tests/size/test_meta.py
holds it equal to the meta run wherever both apply):
- a dynamic sliding or chunked layer (window W) keeps a *view* of the last W-1 tokens of `cat(kept, new)`: after
  the prefill the view sits in the whole prefill concatenation (storage = prefill tokens); after a decode step
  the concatenation is only `kept + 1`, so storage = min(seen-1, W-1) + 1;
- a static layer allocates min(W, max_cache_len) slots at its first update;
- quantized, a backend that keeps a residual (quanto, hqq): the prefill is quantized whole; decode tokens go to a
  full-precision residual that is flushed (everything re-quantized) when it would reach residual_length, so
  r = s mod residual_length; one that keeps none (fp8) quantizes every token on arrival (`kvlab.size.packing`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kvlab.i18n import _
from kvlab.names import DTYPE_BYTES
from kvlab.quantized_backends import BACKENDS_BY_NAME
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
    """One cache layer as transformers builds and fills it: what it keeps per token and per sequence (keys and
    values, an MLA latent, a conv and recurrent state), its window, and what a quantizer packs."""

    kind: str  # "full" | "sliding" | "chunked" | "linear" | "dummy", or "cross" (an encoder-decoder's cross-attention)
    elements: Growth  # elements of the cache dtype: bytes = elements x element size
    dynamic_other: Growth  # bytes of tensors in other dtypes (int64 counters), in a DynamicCache
    static_other: Growth  # ... in a StaticCache
    window: int | None = None  # the most token slots the layer keeps (sliding window, attention chunk)
    key_shape: tuple[int, int] | None = None  # (heads, dim) of one token's keys, for quantized packing
    value_shape: tuple[int, int] | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict) -> LayerFacts:
        growths = {k: Growth(**data[k]) for k in ("elements", "dynamic_other", "static_other")}
        shapes = {k: tuple(data[k]) for k in ("key_shape", "value_shape") if data.get(k)}
        rest = {k: data[k] for k in ("kind", "window") if k in data}  # older files also name the layer classes
        return cls(**rest, **growths, **shapes)


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of a dtype kvlab sizes; any other name is refused, naming the valid ones."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(_("unknown dtype {dtype!r}; valid: {valid}").format(dtype=dtype, valid=", ".join(DTYPE_BYTES)))
    return DTYPE_BYTES[dtype]


def bytes_by_kind(pairs) -> dict[str, int]:
    """{layer kind: bytes} summed over (layer kind, bytes) pairs, kinds in the order they first come."""
    totals: dict[str, int] = {}
    for kind, held in pairs:
        totals[kind] = totals.get(kind, 0) + held
    return totals


@dataclass(frozen=True)
class LayerSize:
    bytes: int
    slots_live: int  # token slots the next query may attend
    slots_stored: int  # token slots the storage spans (allocated for static, whole concatenation for sliding views)
    packed_bytes: int = 0
    residual_bytes: int = 0
    residual_tokens: int = 0


def _size(facts: LayerFacts, other: Growth, stored: int, live: int, batch: int, elem: int) -> LayerSize:
    if not facts.elements.per_token:  # a state that does not grow with tokens
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


def quantized(facts: LayerFacts, prefill: int, step: int, batch: int, elem: int, options: dict) -> LayerSize:
    """A QuantizedCache layer: packed keys and values (their measured per-token shapes) + the residual. `options`:
    the cache's, transformers' defaults filled in (fp8 takes none)."""
    backend = options["backend"]
    seen = prefill + step
    residual = step % options["residual_length"] if BACKENDS_BY_NAME[backend].keeps_residual else 0
    packed = 0
    for (heads, dim), axis in (
        (facts.key_shape, options.get("axis_key")),
        (facts.value_shape, options.get("axis_value")),
    ):
        shape = (batch, heads, seen - residual, dim)
        packed += packed_bytes(backend, shape, options.get("nbits"), axis, options.get("q_group_size"), elem)
    residual_bytes = batch * residual * facts.elements.per_token * elem
    return LayerSize(packed + residual_bytes, seen, seen, packed, residual_bytes, residual)
