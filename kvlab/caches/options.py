"""Validation of cache kinds and options, shared by the cache classes, `make_cache` and the command line.

Every check runs before any model work, and every message names what is valid.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.layer_state import layer_kinds

CACHE_KINDS = ("none", "dynamic", "static", "offloaded", "offloaded_static", "quantized")
QUANTIZED_OPTIONS = ("nbits", "axis_key", "axis_value", "q_group_size", "residual_length")
# Kinds whose layers can record the past (DynamicCache-based: their sliding layers grow until a crop).
PAST_RECORDING_KINDS = ("dynamic", "offloaded")


class CacheOptionError(ValueError):
    """An invalid cache kind, option or combination."""


def check_cache_kind(kind: str) -> str:
    if kind not in CACHE_KINDS:
        raise CacheOptionError(f"unknown cache kind {kind!r}; valid kinds: {', '.join(CACHE_KINDS)}")
    return kind


def _describe_layers(config) -> str:
    kinds = layer_kinds(config)
    window = getattr(config.get_text_config(decoder=True), "sliding_window", None)
    counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
    text = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    return f"its {len(kinds)} layers are {text}" + (f" (sliding window {window})" if window and "sliding" in counts else "")


def check_quantized_options(backend: str, config, **options) -> None:
    """Refuse what QuantizedCache cannot do, in kvlab's words, before anything is allocated."""
    if backend not in _compat.QUANTIZED_BACKENDS:
        raise CacheOptionError(f"unknown quantization backend {backend!r}; valid: {', '.join(_compat.QUANTIZED_BACKENDS)}")
    unknown = set(options) - set(QUANTIZED_OPTIONS)
    if unknown:
        raise CacheOptionError(f"unknown quantized cache options {sorted(unknown)}; valid: {', '.join(QUANTIZED_OPTIONS)}")
    given = {k: v for k, v in options.items() if v is not None}
    if backend == "fp8":
        if given:
            raise CacheOptionError(
                f"the fp8 backend quantizes per tensor and takes none of {', '.join(QUANTIZED_OPTIONS)}; got "
                f"{', '.join(sorted(given))}. Use backend hqq or quanto for group-wise options."
            )
    else:
        nbits = given.get("nbits", _compat.QUANTIZED_DEFAULTS["nbits"])
        valid_bits = _compat.HQQ_NBITS if backend == "hqq" else _compat.QUANTO_NBITS
        if nbits not in valid_bits:
            raise CacheOptionError(f"{backend} nbits must be one of {', '.join(map(str, valid_bits))}; got {nbits}")
        valid_axes = _compat.HQQ_AXES if backend == "hqq" else _compat.QUANTO_AXES
        for axis_name in ("axis_key", "axis_value"):
            if given.get(axis_name, 0) not in valid_axes:
                raise CacheOptionError(
                    f"{backend} {axis_name} must be one of {', '.join(map(str, valid_axes))}; got {given[axis_name]}"
                )
        for name in ("q_group_size", "residual_length"):
            if name in given and (not isinstance(given[name], int) or given[name] < 1):
                raise CacheOptionError(f"{name} must be a positive integer; got {given[name]!r}")
    if config is not None and any(k != "full" for k in layer_kinds(config)):
        raise CacheOptionError(
            "a quantized cache needs every layer to be full attention, and this model is not: "
            f"{_describe_layers(config)}. transformers' QuantizedCache does not support sliding or linear-attention "
            "layers (the cache guide's table: quantized does not support sliding layers); use dynamic, static or "
            "offloaded for this model."
        )


def check_static_length(max_cache_len: int | None, prompt_tokens: int | None = None, new_tokens: int | None = None):
    """A static cache must fit the prompt (and, to finish, the generated tokens)."""
    if max_cache_len is None:
        return
    if not isinstance(max_cache_len, int) or max_cache_len < 1:
        raise CacheOptionError(f"max_cache_len must be a positive integer; got {max_cache_len!r}")
    if prompt_tokens is not None and max_cache_len < prompt_tokens:
        raise CacheOptionError(
            f"max_cache_len={max_cache_len} is below the prompt length ({prompt_tokens} tokens); "
            f"use at least {prompt_tokens + (new_tokens or 0)} to hold the prompt and the new tokens."
        )


def check_past_recording(kind: str, past_recording: bool) -> None:
    """Past recording keeps evicted tokens until a crop; only DynamicCache layers can do that."""
    if past_recording and kind not in PAST_RECORDING_KINDS:
        raise CacheOptionError(
            f"past recording is for {' and '.join(PAST_RECORDING_KINDS)} caches (DynamicCache layers); a {kind!r} "
            "cache cannot keep evicted tokens for a later crop."
        )
