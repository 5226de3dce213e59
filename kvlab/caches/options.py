"""Validation of cache kinds and options, shared by the cache classes, `make_cache` and the command line.

Every check runs before any model work, and every message names what is valid. What transformers would only
find mid-generation is checked here against the model's shapes, before anything is allocated:
- quantized group sizes per backend (`check_quantized_options`): hqq at axis 0 packs along each group, so the
  group must hold a whole number of packed words; quanto splits the values per channel into groups, at every
  length it quantizes (the prefill, then prefill + k x residual_length), so the group size must divide them;
- offloading with nothing to offload (`check_offloading`): with offload_only_non_sliding=True on a model whose
  attention layers are all sliding, transformers' prefetch finds no layer and raises "True is not in list" in
  the first forward.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.layer_kinds import layer_kinds

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


def _describe_kinds(kinds: list[str], window: int | None) -> str:
    counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
    text = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    return f"its {len(kinds)} layers are {text}" + (
        f" (sliding window {window})" if window and "sliding" in counts else ""
    )


def _describe_layers(config) -> str:
    return _describe_kinds(layer_kinds(config), getattr(config.get_text_config(decoder=True), "sliding_window", None))


def check_quantized_layers(kinds: list[str], window: int | None = None) -> None:
    """transformers' QuantizedCache takes full-attention layers only: refuse any other, naming what the model has."""
    if any(k != "full" for k in kinds):
        raise CacheOptionError(
            "a quantized cache needs every layer to be full attention, and this model is not: "
            f"{_describe_kinds(list(kinds), window)}. transformers' QuantizedCache does not support sliding or "
            "linear-attention layers (the cache guide's table: quantized does not support sliding layers); use "
            "dynamic, static or offloaded for this model."
        )


def check_quantized_options(
    backend: str,
    config,
    *,
    prompt_tokens: int | None = None,
    cached_tokens: int | None = None,
    batch: int = 1,
    **options,
) -> None:
    """Refuse what QuantizedCache cannot do, in kvlab's words, before anything is allocated.

    With the model's `config`, group sizes are checked against its shapes; with `prompt_tokens` (and
    `cached_tokens`, the most tokens the cache will hold: prompt + new tokens - 1) also at every length the
    cache will quantize, for `batch` sequences (beams and returned sequences included).
    """
    if backend not in _compat.QUANTIZED_BACKENDS:
        raise CacheOptionError(
            f"unknown quantization backend {backend!r}; valid: {', '.join(_compat.QUANTIZED_BACKENDS)}"
        )
    unknown = set(options) - set(QUANTIZED_OPTIONS)
    if unknown:
        raise CacheOptionError(
            f"unknown quantized cache options {sorted(unknown)}; valid: {', '.join(QUANTIZED_OPTIONS)}"
        )
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
    if config is not None:
        check_quantized_layers(
            layer_kinds(config), getattr(config.get_text_config(decoder=True), "sliding_window", None)
        )
    if backend != "fp8":
        settings = {**_compat.QUANTIZED_DEFAULTS, **given}
        _check_group_size(backend, config, settings, prompt_tokens, cached_tokens, batch)


def quantized_lengths(prompt_tokens: int, residual_length: int, cached_tokens: int | None = None) -> list[int]:
    """The sequence lengths a QuantizedLayer quantizes at, as far as they matter for divisibility.

    It quantizes the whole prefill, then everything whenever its residual fills: at prompt + k x residual_length
    tokens. A group size that divides the values at the prompt and at the first flush divides them at every later
    flush too (the difference is k times the same residual), so two lengths decide; one when the cache never
    reaches its first flush (`cached_tokens`, when known).
    """
    first_flush = prompt_tokens + residual_length
    return [prompt_tokens] + ([first_flush] if cached_tokens is None or cached_tokens >= first_flush else [])


def _kv_shape(config) -> tuple[int, int]:
    text = config.get_text_config(decoder=True)
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return int(heads), int(head_dim)


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _check_group_size(backend: str, config, settings: dict, prompt_tokens, cached_tokens, batch: int) -> None:
    group, nbits = settings["q_group_size"], settings["nbits"]
    axes = {settings["axis_key"], settings["axis_value"]}
    if backend == "hqq":
        multiple = _compat.HQQ_AXIS0_GROUP_MULTIPLE[nbits]
        if 0 in axes and group % multiple:
            raise CacheOptionError(
                f"hqq at {nbits} bits and axis 0 packs the q_group_size rows of each group {multiple} at a time, so "
                f"q_group_size must be a multiple of {multiple}; got {group}. Valid: a multiple of {multiple} "
                f"(the default is 64), or axis_key=axis_value=1, where kvlab pads the sequence for any group size."
            )
        return
    if config is None or prompt_tokens is None:
        return  # quanto's groups depend on the lengths: checked where they are known (run, generate, the CLI)
    heads, head_dim = _kv_shape(config)
    for axis in sorted(axes):
        # quanto groups the values of each slice along `axis`: (kv_heads x tokens x head_dim) per sequence at
        # axis 0, (batch x kv_heads x tokens) per channel at axis -1
        per_token = heads * head_dim if axis == 0 else batch * heads
        what = (
            f"kv_heads x tokens x head_dim = {heads} x S x {head_dim}"
            if axis == 0
            else f"batch x kv_heads x tokens = {batch} x {heads} x S"
        )
        for length in quantized_lengths(prompt_tokens, settings["residual_length"], cached_tokens):
            values = per_token * length
            if values % group:
                raise CacheOptionError(
                    f"quanto at axis {axis} quantizes groups of q_group_size={group} values out of {what}; at "
                    f"S={length} tokens (the {'prompt' if length == prompt_tokens else 'first residual flush'}) that "
                    f"is {values}, which {group} does not divide. Valid for every length: {_divisors(per_token)}."
                )


def check_offloading(config, offload_only_non_sliding: bool, kind: str = "offloaded") -> None:
    """Refuse offloading that has no layer to offload: transformers' prefetch raises mid-generation.

    Offloaded layers are the attention layers that are not sliding when `offload_only_non_sliding`
    (transformers' default for offloaded_static, not for offloaded); linear-attention layers never are.
    """
    if config is None or not offload_only_non_sliding:
        return
    empty = _compat.DynamicCache(config=config.get_text_config(decoder=True))  # layers are lazy: nothing allocated
    attention = [not (linear or dummy) for linear, dummy in zip(empty.is_linear, empty.is_dummy)]
    offloadable = [a and not sliding for a, sliding in zip(attention, empty.is_sliding)]
    if any(attention) and not any(offloadable):
        raise CacheOptionError(
            f"{kind} with offload_only_non_sliding=True offloads only the non-sliding attention layers, and this "
            f"model has none ({_describe_layers(config)}): transformers' prefetch would fail in the first forward "
            "('True is not in list'). "
            "Valid here: offload_only_non_sliding=False (offload every layer), or a cache that does not offload."
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
