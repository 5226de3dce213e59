"""KV-cache bytes of every cache kind for an architecture, without running a model.

`cache_size` adds up each layer's bytes (`kvlab.size.layers`) for a prefill then one-token decode steps, held at
the end and at the peak, counted as a trace counts them (distinct storages, layer by layer in update order); the
tests hold it equal to `kvlab.size.meta.meta_cache_bytes` and to live traces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kvlab.cache_kinds import BY_NAME, CACHE_KINDS, STATIC_KINDS
from kvlab.caches.options import check_options
from kvlab.i18n import _
from kvlab.quantized_backends import BACKENDS_BY_NAME, DEFAULT_BACKEND
from kvlab.recording.slots import masked_share
from kvlab.size import layers as rules
from kvlab.size.architecture import Architecture

SIZE_KINDS = tuple(cache_kind for cache_kind in CACHE_KINDS if cache_kind != "none")  # the kinds that keep a cache


@dataclass
class CacheSize:
    cache_kind: str
    options: dict
    tokens: int
    prefill: int
    batch: int
    dtype: str
    bytes: int  # held after the last step
    peak_bytes: int  # the most held at any point (after any single layer update)
    slots_live: int
    slots_stored: int  # slots the storage spans (`kvlab.size.layers`)
    packed_bytes: int = 0
    residual_bytes: int = 0
    by_layer_kind: dict = field(default_factory=dict)
    cross_bytes: int = 0  # encoder-decoder: the cross-attention cache (fixed at the source length)
    state_bytes: int = 0  # bytes that do not grow with tokens: linear-attention state, counters
    note: str = ""

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / self.tokens if self.tokens else 0.0

    @property
    def slots_masked(self) -> int:
        """Allocated slots no query can attend: a static cache's (the others allocate only what is live)."""
        return max(self.slots_stored - self.slots_live, 0) if self.cache_kind in STATIC_KINDS else 0

    @property
    def waste_bytes(self) -> int:
        """Bytes of allocated slots no query can attend (a static cache's price for its fixed shape)."""
        slot_bytes = self.bytes - self.cross_bytes - self.state_bytes
        return round(masked_share(slot_bytes, self.slots_masked, self.slots_stored))

    def to_dict(self) -> dict:
        return {**asdict(self), "bytes_per_token": self.bytes_per_token, "waste_bytes": self.waste_bytes}


def quantized_options(options: dict) -> dict:
    """The quantized options with transformers' defaults filled in, those its backend takes (fp8: none)."""
    row = BACKENDS_BY_NAME[options.get("backend", DEFAULT_BACKEND)]
    return {"backend": row.name, **{k: options.get(k, row.defaults[k]) for k in row.options}}


def _layer(
    facts: rules.LayerFacts, cache_kind: str, prefill: int, step: int, batch: int, elem: int, options: dict, source: int
) -> rules.LayerSize:
    if facts.kind == "cross":  # filled once, at the first decoder step, with the encoder's states
        if cache_kind in STATIC_KINDS:
            return rules.static(facts, source, 0, source, batch, elem)
        return rules.dynamic(facts, source, 0, batch, elem)
    if cache_kind in STATIC_KINDS:
        return rules.static(facts, prefill, step, options["max_cache_len"], batch, elem)
    if cache_kind == "quantized":  # `options` with transformers' defaults filled in
        return rules.quantized(facts, prefill, step, batch, elem, options)
    return rules.dynamic(facts, prefill, step, batch, elem)  # dynamic, offloaded


def _peak(step_sizes: dict[int, list[int]], steps: list[int]) -> int:
    """Most bytes held after any single layer update, over the candidate steps: between them every layer only
    grows (the prefill, the first decode step, where sliding layers drop their prefill concatenation, the last
    step, and the last step before a quantized flush)."""
    peak = 0
    for step in steps:
        now = step_sizes[step]
        before = step_sizes.get(step - 1, [0] * len(now))
        running = sum(before)
        for old, new in zip(before, now):
            running += new - old
            peak = max(peak, running)
    return peak


def cache_size(
    arch: Architecture,
    cache_kind: str = "dynamic",
    tokens: int = 1,
    *,
    prefill: int | None = None,
    batch: int = 1,
    dtype: str = "float32",
    source_tokens: int | None = None,
    **options,
) -> CacheSize:
    """Bytes a `cache_kind` cache holds for `arch` after `tokens` tokens (prefill + one-token decode steps); every
    option rule first, on the architecture's facts: the same refusal as `make_cache` and `kvlab.run`."""
    check_options(cache_kind, options, arch.facts, tokens=tokens, kinds=SIZE_KINDS)
    return sized(
        arch, cache_kind, tokens, options, prefill=prefill, batch=batch, dtype=dtype, source_tokens=source_tokens
    )


def sized(
    arch: Architecture,
    cache_kind: str,
    tokens: int,
    options: dict,
    *,
    prefill: int | None = None,
    batch: int = 1,
    dtype: str = "float32",
    source_tokens: int | None = None,
) -> CacheSize:
    """`cache_size` with `options` already checked (a checked request's: the memory rule sizes many lengths, and
    checks none of them again). The options are a dict, not keywords, so no option name meets a sizing one."""
    prefill = tokens if prefill is None else prefill
    if tokens < 1 or not 1 <= prefill <= tokens:
        raise ValueError(
            _("need tokens >= 1 and 1 <= prefill <= tokens; got tokens={tokens}, prefill={prefill}").format(
                tokens=tokens, prefill=prefill
            )
        )
    if batch < 1:
        raise ValueError(_("batch must be at least 1; got {batch}").format(batch=batch))
    elem = rules.dtype_bytes(dtype)
    source_tokens = tokens if source_tokens is None else source_tokens
    last = tokens - prefill
    steps = {0, min(1, last), last}
    if cache_kind == "quantized":
        q = quantized_options(options)
        residual_length = q.get("residual_length")
        if residual_length and last >= residual_length:
            steps.add(last - (last + 1) % residual_length)  # the last step whose residual is full but not flushed
        options = {**options, **q}
    candidate_steps = sorted(s for s in steps | {s - 1 for s in steps} if s >= 0)
    sizes = {  # (layer kind or "cross", size) in update order, after each candidate step
        s: [(f.kind, _layer(f, cache_kind, prefill, s, batch, elem, options, source_tokens)) for f in arch.layers]
        for s in candidate_steps
    }
    final = sizes[last]
    by_layer_kind = rules.bytes_by_kind((layer_kind, size.bytes) for layer_kind, size in final)
    self_layers = [size for layer_kind, size in final if layer_kind != "cross"]
    return CacheSize(
        cache_kind=cache_kind,
        options={k: v for k, v in options.items() if v is not None},
        tokens=tokens,
        prefill=prefill,
        batch=batch,
        dtype=dtype,
        bytes=sum(size.bytes for _, size in final),
        peak_bytes=_peak({s: [size.bytes for _, size in v] for s, v in sizes.items()}, sorted(steps)),
        slots_live=sum(s.slots_live for s in self_layers),
        slots_stored=sum(s.slots_stored for s in self_layers),
        packed_bytes=sum(s.packed_bytes for s in self_layers),
        residual_bytes=sum(s.residual_bytes for s in self_layers),
        by_layer_kind=by_layer_kind,
        cross_bytes=by_layer_kind.get("cross", 0),
        state_bytes=sum(size.bytes for _, size in final) - _token_bytes(arch, final, cache_kind, batch, elem),
        note=_note(arch, cache_kind, options),
    )


def _token_bytes(arch: Architecture, final, cache_kind: str, batch: int, elem: int) -> int:
    """Bytes of token slots (keys and values) in the self-attention layers at the end: what a masked slot wastes."""
    if cache_kind == "quantized":
        return sum(size.bytes for kind, size in final if kind != "cross")
    return sum(
        facts.elements.per_token * batch * elem * size.slots_stored
        for facts, (kind, size) in zip(arch.layers, final)
        if kind != "cross"
    )


def _note(arch: Architecture, cache_kind: str, options: dict) -> str:
    if BY_NAME[cache_kind].offloads:
        return (
            "same bytes, held in CPU memory; on an accelerator transformers keeps the layer in use and the one "
            "prefetched ahead"
            + (
                " (sliding layers stay resident)"
                if options.get("offload_only_non_sliding", True) and any(k != "full" for k in arch.layer_kinds)
                else ""
            )
        )
    return ""
