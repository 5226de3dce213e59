"""The most bytes one generation's cache would hold, predicted from the model's config before anything is
allocated: the size calculator's, so a memory refusal names the bytes `kvlab size` and a trace would show.

A request holds at most `cached_tokens` (prompt + new - 1; an encoder-decoder's decoder, its new tokens) for
`batch` sequences; a static kind is sized at its `max_cache_len`. No torch: `kvlab run` predicts before loading.
"""

from __future__ import annotations

from kvlab.cache_kinds import STATIC_KINDS
from kvlab.model_facts import ModelFacts
from kvlab.names import DTYPE_BYTES
from kvlab.size.architecture import Architecture, from_config
from kvlab.size.calculator import sized


def _architecture(facts: ModelFacts) -> Architecture | None:
    try:
        return from_config(facts)
    except ValueError:  # a layer kind or state the calculator does not model, or no decoder cache at all
        return None


def _peak(arch: Architecture, cache_kind: str, options: dict, prompt_tokens: int, length: int, batch, dtype) -> int:
    """Peak bytes when the cache is sized for `length`: a static kind's slots, any other kind's tokens. The options
    are a checked request's (`kvlab.rules.check`), so no probe of `most_length`'s search checks them again."""
    options = {**options, "max_cache_len": length} if cache_kind in STATIC_KINDS else options
    if arch.is_encoder_decoder:  # the decoder starts from one token; the encoder's states fill the cross cache
        shape = {"prefill": 1, "source_tokens": prompt_tokens}
    else:
        shape = {"prefill": min(prompt_tokens, length)}
    return sized(arch, cache_kind, length, batch=batch, dtype=dtype, options=options, **shape).peak_bytes


def requested_length(cache_kind: str, options: dict, cached_tokens: int) -> int:
    """What sizes the cache: a static kind's max_cache_len (generate's own, `cached_tokens`, when none is set),
    any other kind's tokens."""
    if cache_kind in STATIC_KINDS:
        return max(options.get("max_cache_len") or cached_tokens, cached_tokens)
    return cached_tokens


def request_bytes(
    facts: ModelFacts,
    cache_kind: str,
    options: dict,
    *,
    prompt_tokens: int,
    cached_tokens: int,
    batch: int = 1,
    dtype: str = "float32",
) -> int | None:
    """The most bytes the request's cache holds at any point; None where the calculator cannot say (a prediction
    that cannot be made refuses nothing)."""
    arch = _architecture(facts)
    if arch is None or cache_kind == "none" or dtype not in DTYPE_BYTES:
        return None
    length = requested_length(cache_kind, options, cached_tokens)
    try:
        return _peak(arch, cache_kind, options, prompt_tokens, length, batch, dtype)
    except ValueError:  # a size the calculator refuses; the option rules ran before, with the request's facts
        return None


def most_length(
    facts: ModelFacts,
    cache_kind: str,
    options: dict,
    *,
    prompt_tokens: int,
    cached_tokens: int,
    budget: int,
    batch: int = 1,
    dtype: str = "float32",
) -> int:
    """The largest length (a static kind's max_cache_len, any other kind's cached tokens) whose cache fits in
    `budget` bytes, from the prompt (one token for an encoder-decoder) up; 0 when not even that fits. A binary
    search: bytes never shrink as the length grows."""
    arch = _architecture(facts)
    if arch is None:
        return 0
    low = 1 if arch.is_encoder_decoder else prompt_tokens
    high = requested_length(cache_kind, options, cached_tokens)

    def fits(length: int) -> bool:
        return _peak(arch, cache_kind, options, prompt_tokens, length, batch, dtype) <= budget

    if not fits(low):
        return 0
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low
