"""Every rule about cache kinds and options: `check_options` is the one check, and the rules below are its parts.

Each entry point passes what it knows and gets the same one-line `CacheOptionError` for the same mistake; a rule
whose facts are missing is left to a later call that has them. What transformers would only find mid-generation
is checked here against the model's shapes, before anything is allocated: quantized group sizes per backend (hqq
at axis 0 packs along each group; quanto groups the values at every length it quantizes), and offloading with no
layer to offload (transformers' prefetch raises "True is not in list" in the first forward).
"""

from __future__ import annotations

import math
from dataclasses import replace

from kvlab.cache_kinds import (
    BATCH_KINDS,
    BY_NAME,
    CACHE_KINDS,
    KIND_OPTIONS,
    PAGE_SIZES,
    PAGED,
    PAGED_DEFAULTS,
    PAST_RECORDING_KINDS,
    QUANTIZED_OPTIONS,
    STATIC_KINDS,
)
from kvlab.errors import KvlabUserError
from kvlab.i18n import _, layer_kind_label
from kvlab.model_facts import ModelFacts
from kvlab.quantized_backends import BACKEND_NAMES, BACKENDS, BACKENDS_BY_NAME, DEFAULT_BACKEND, QuantizedBackend
from kvlab.request import Request


class CacheOptionError(KvlabUserError, ValueError):
    """An invalid cache kind, option or combination."""


class PagedLayoutError(CacheOptionError):
    """A model whose paged cache kvlab neither instruments nor sizes: layers other than full attention."""


def check_paged_layers(kinds: list[str] | tuple[str, ...], name: str) -> None:
    """transformers' PagedAttentionCache keeps one block allocator per attention type, and kvlab records (and
    sizes) the full-attention one only: any other layer kind is refused before anything runs."""
    others = sorted({kind for kind in kinds if kind != "full"})
    if others:
        raise PagedLayoutError(
            _(
                "kvlab instruments transformers' paged cache, and sizes its layout, for models whose layers are all "
                "full attention; {name} has {kinds} layers ({full} of {layers} full). Plain model.generate_batch(...) "
                "still runs it."
            ).format(name=name, kinds=", ".join(others), full=list(kinds).count("full"), layers=len(kinds))
        )


def paged_blocks(length: int, block_size: int) -> int:
    """Blocks of `block_size` slots a request holding `length` tokens occupies."""
    if block_size < 1:
        raise ValueError(_("block_size must be >= 1, got {block_size}").format(block_size=block_size))
    return math.ceil(length / block_size)


def check_page_size(page_size, sizes: tuple[int, ...] | None = None) -> int:
    """`page_size` if it is a positive integer, and one of `sizes` where the caller offers a choice."""
    if sizes is not None and page_size not in sizes:
        raise CacheOptionError(
            _("page_size must be one of {valid}; got {got}").format(
                valid=", ".join(map(str, sizes)), got=repr(page_size)
            )
        )
    if not isinstance(page_size, int) or page_size < 1:
        raise CacheOptionError(_("page_size must be a positive integer; got {got}").format(got=repr(page_size)))
    return page_size


def check_paged_options(options: dict, max_requests: int) -> dict:
    """The paged kind's options checked, defaults filled in; `max_requests`: the workload's size (`kvlab.serving`)."""
    given = {**PAGED_DEFAULTS, **check_option_names(PAGED, options)}
    check_page_size(given["page_size"], PAGE_SIZES)
    requests = given["requests"]
    if not isinstance(requests, int) or not 1 <= requests <= max_requests:
        raise CacheOptionError(
            _("requests must be between 1 and {most}; got {got}").format(most=max_requests, got=repr(requests))
        )
    if not isinstance(given["num_blocks"], int) or given["num_blocks"] < 0:
        raise CacheOptionError(
            _("num_blocks must be 0 (room for every request) or a positive number of blocks; got {got}").format(
                got=repr(given["num_blocks"])
            )
        )
    return given


def pool_blocks(prompt_lengths: list[int], new_tokens: int, page_size: int, num_blocks: int) -> int:
    """The pool's size in blocks: `num_blocks`, or (0) room for every request at its final length. A pool smaller
    than the largest request alone needs is refused: transformers would fail every request."""
    need = [paged_blocks(n + new_tokens, page_size) for n in prompt_lengths]
    if num_blocks == 0:
        return sum(need)
    if num_blocks < max(need):
        raise CacheOptionError(
            _(
                "num_blocks={num_blocks} is too small: the largest request ({tokens} tokens with its answer) needs "
                "{need} blocks of {page_size}; use at least {need}, or 0 for room for every request ({total} blocks)"
            ).format(
                num_blocks=num_blocks,
                tokens=max(prompt_lengths) + new_tokens,
                need=max(need),
                page_size=page_size,
                total=sum(need),
            )
        )
    return num_blocks


def check_cache_kind(cache_kind: str | type, kinds: tuple[str, ...] = CACHE_KINDS) -> str:
    """`cache_kind` if it is one of `kinds`; the paged kind is refused in words of its own (`generate` cannot build
    it)."""
    if cache_kind in BATCH_KINDS and cache_kind not in kinds:
        raise CacheOptionError(
            _(
                "cache kind '{kind}' is continuous batching: model.generate_batch(...) builds its paged cache inside "
                "its manager, so generate and make_cache cannot; record it with kvlab.watch(model) around "
                "model.generate_batch(...) (notebook 12), run it in the explorer, or size it with kvlab size "
                "--page-size; valid kinds here: {kinds}"
            ).format(kind=cache_kind, kinds=", ".join(kinds))
        )
    if not isinstance(cache_kind, str) or cache_kind not in kinds:
        raise CacheOptionError(
            _("unknown cache kind {kind!r}; valid kinds: {kinds}").format(kind=cache_kind, kinds=", ".join(kinds))
        )
    return cache_kind


def _describe_kinds(kinds: list[str], window: int | None) -> str:
    """What a refusal says of the layers, "its 26 layers are 22 sliding, 4 full (sliding window 512)"."""
    counts = {layer_kind: kinds.count(layer_kind) for layer_kind in dict.fromkeys(kinds)}
    text = ", ".join(f"{n} {layer_kind_label(layer_kind, plural=n != 1)}" for layer_kind, n in counts.items())
    described = _("its {layers} layers are {kinds}").format(layers=len(kinds), kinds=text)
    if window and "sliding" in counts:
        described += _(" (sliding window {window})").format(window=window)
    return described


def check_quantized_layers(kinds: list[str], window: int | None = None) -> None:
    """transformers' QuantizedCache takes full-attention layers only."""
    if any(k != "full" for k in kinds):
        raise CacheOptionError(
            _(
                "a quantized cache needs every layer to be full attention, and this model is not: {layers}. "
                "transformers' QuantizedCache does not support sliding or linear-attention layers (the cache guide's "
                "table: quantized does not support sliding layers); use dynamic, static or offloaded for this model."
            ).format(layers=_describe_kinds(list(kinds), window))
        )


def check_backend(backend: str) -> QuantizedBackend:
    """The row of `backend` (`kvlab.quantized_backends`), or the refusal naming every backend there is."""
    if backend not in BACKENDS_BY_NAME:
        raise CacheOptionError(
            _("unknown quantization backend {backend!r}; valid: {valid}").format(
                backend=backend, valid=", ".join(BACKEND_NAMES)
            )
        )
    return BACKENDS_BY_NAME[backend]


def check_quantized_options(
    backend: str,
    facts: ModelFacts | None,
    *,
    prompt_tokens: int | None = None,
    cached_tokens: int | None = None,
    batch: int = 1,
    **options,
) -> None:
    """What QuantizedCache cannot do, refused before anything is allocated: with the model's `ModelFacts`, group
    sizes against its shapes; with `prompt_tokens` (and `cached_tokens`, the most the cache
    holds) also at every length it will quantize, for `batch` sequences. The valid values are the backend's row."""
    row = check_backend(backend)
    unknown = set(options) - set(QUANTIZED_OPTIONS)
    if unknown:
        raise CacheOptionError(
            _("unknown quantized cache options {unknown}; valid: {valid}").format(
                unknown=sorted(unknown), valid=", ".join(QUANTIZED_OPTIONS)
            )
        )
    given = {k: v for k, v in options.items() if v is not None}
    if given and not row.group_wise:
        group_wise = [other.name for other in BACKENDS if other.group_wise]
        raise CacheOptionError(
            _(
                "the {backend} backend quantizes per tensor and takes none of {options}; got {given}. Use backend "
                "{group_wise} for group-wise options."
            ).format(
                backend=backend,
                options=", ".join(QUANTIZED_OPTIONS),
                given=", ".join(sorted(given)),
                group_wise=_either(group_wise),
            )
        )
    if row.group_wise:
        _check_group_values(row, given)
    if facts is not None:
        check_quantized_layers(list(facts.layer_kinds), facts.sliding_window)
    if row.group_wise:
        settings = {**row.defaults, **given}
        GROUP_RULES[row.layout](row, facts, settings, prompt_tokens, cached_tokens, batch)


def _either(names: list[str]) -> str:
    """ "hqq or quanto", "a, b or c": the words of a refusal that offers a choice."""
    if len(names) < 2:
        return "".join(names)
    return _("{some} or {last}").format(some=", ".join(names[:-1]), last=names[-1])


def _check_group_values(row: QuantizedBackend, given: dict) -> None:
    nbits = given.get("nbits", row.defaults["nbits"])
    if nbits not in row.nbits:
        raise CacheOptionError(
            _("{backend} nbits must be one of {valid}; got {nbits}").format(
                backend=row.name, valid=", ".join(map(str, row.nbits)), nbits=nbits
            )
        )
    for axis_name in ("axis_key", "axis_value"):
        if given.get(axis_name, row.defaults[axis_name]) not in row.axes:
            raise CacheOptionError(
                _("{backend} {axis} must be one of {valid}; got {got}").format(
                    backend=row.name, axis=axis_name, valid=", ".join(map(str, row.axes)), got=given[axis_name]
                )
            )
    for name in ("q_group_size", "residual_length"):
        if name in given and (not isinstance(given[name], int) or given[name] < 1):
            raise CacheOptionError(
                _("{name} must be a positive integer; got {got!r}").format(name=name, got=given[name])
            )


def quantized_lengths(prompt_tokens: int, residual_length: int, cached_tokens: int | None = None) -> list[int]:
    """The lengths a QuantizedLayer quantizes at, as far as divisibility goes: the prefill, then prompt + k x
    residual_length; a group that divides the first two divides every later one (they differ by k residuals). One
    length when the cache never reaches its first flush (`cached_tokens`, when known)."""
    first_flush = prompt_tokens + residual_length
    return [prompt_tokens] + ([first_flush] if cached_tokens is None or cached_tokens >= first_flush else [])


def _check_hqq_groups(
    row: QuantizedBackend, facts: ModelFacts | None, settings: dict, prompt_tokens, cached_tokens, batch: int
) -> None:
    """hqq at axis 0 packs along each group: a group holds whole words, unless its words pad themselves. The shapes
    do not matter (kvlab pads the sequence at axis 1)."""
    group, nbits = settings["q_group_size"], settings["nbits"]
    multiple = 1 if nbits in row.self_padding else row.words[nbits][0]
    if 0 in {settings["axis_key"], settings["axis_value"]} and group % multiple:
        raise CacheOptionError(
            _(
                "hqq at {nbits} bits and axis 0 packs the q_group_size rows of each group {multiple} at a time, so "
                "q_group_size must be a multiple of {multiple}; got {group}. Valid: a multiple of {multiple} (the "
                "default is 64), or axis_key=axis_value=1, where kvlab pads the sequence for any group size."
            ).format(nbits=nbits, multiple=multiple, group=group)
        )


def _check_quanto_groups(
    row: QuantizedBackend, facts: ModelFacts | None, settings: dict, prompt_tokens, cached_tokens, batch: int
) -> None:
    """quanto groups the values of each slice along the axis: a group divides them at every length it quantizes."""
    if facts is None or prompt_tokens is None:
        return  # quanto's groups depend on the lengths: checked where they are known
    group, heads, head_dim = settings["q_group_size"], facts.kv_heads, facts.head_dim
    for axis in sorted({settings["axis_key"], settings["axis_value"]}):
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
                moment = _("the prompt") if length == prompt_tokens else _("the first residual flush")
                divisors = ", ".join(str(d) for d in range(1, per_token + 1) if per_token % d == 0)
                raise CacheOptionError(
                    _(
                        "quanto at axis {axis} quantizes groups of q_group_size={group} values out of {shape}; at "
                        "S={length} tokens ({moment}) that is {values}, which {group} does not divide. Valid for "
                        "every length: {divisors}."
                    ).format(
                        axis=axis,
                        group=group,
                        shape=what,
                        length=length,
                        moment=moment,
                        values=values,
                        divisors=divisors,
                    )
                )


# The group-size rule of each group-wise layout (`kvlab.quantized_backends.LAYOUTS`): what its library refuses
# mid-generation, checked here against the model's shapes first.
GROUP_RULES = {"hqq": _check_hqq_groups, "quanto": _check_quanto_groups}


def check_offloading(facts: ModelFacts | None, offload_only_non_sliding: bool, cache_kind: str = "offloaded") -> None:
    """Offloading with no layer to offload is refused: transformers' prefetch raises mid-generation. With
    `offload_only_non_sliding` only non-sliding attention layers offload; linear-attention layers never do (the
    model's `facts` read them from its config)."""
    if facts is None or facts.config is None or not offload_only_non_sliding:
        return
    flags = facts.layer_flags  # (attention, sliding) per layer
    if any(attention for attention, _ in flags) and not any(attention and not sliding for attention, sliding in flags):
        raise CacheOptionError(
            _(
                "{kind} with offload_only_non_sliding=True offloads only the non-sliding attention layers, and this "
                "model has none ({layers}): transformers' prefetch would fail in the first forward ('True is not in "
                "list'). Valid here: offload_only_non_sliding=False (offload every layer), or a cache that does not "
                "offload."
            ).format(kind=cache_kind, layers=_describe_kinds(list(facts.layer_kinds), facts.sliding_window))
        )


def check_static_length(
    max_cache_len: int | None,
    prompt_tokens: int | None = None,
    new_tokens: int | None = None,
    layer_kinds: list[str] | None = None,
    tokens: int | None = None,
) -> None:
    """A static cache must fit the prompt, and in its full-attention layers (sliding ones keep a window) the new
    tokens fed back (all but the last), or `tokens`, as the size calculator counts."""
    if max_cache_len is None:
        return
    if not isinstance(max_cache_len, int) or max_cache_len < 1:
        raise CacheOptionError(
            _("{name} must be a positive integer; got {got!r}").format(name="max_cache_len", got=max_cache_len)
        )
    # the size generate picks itself (max_length - 1) is the smallest one accepted here: the prompt and every new
    # token but the last, which is never fed back (a decoder's `model_facts.tokens_held`)
    needed = None if prompt_tokens is None else prompt_tokens + max(new_tokens or 0, 1) - 1
    if prompt_tokens is not None and max_cache_len < prompt_tokens:
        raise CacheOptionError(
            _(
                "max_cache_len={length} is below the prompt length ({prompt} tokens); use at least {needed} to hold "
                "the prompt and the new tokens fed back (prompt + new - 1, as generate sizes it)."
            ).format(length=max_cache_len, prompt=prompt_tokens, needed=needed)
        )
    if not layer_kinds or "full" not in layer_kinds:
        return
    if prompt_tokens is not None and needed is not None and max_cache_len < needed:
        raise CacheOptionError(
            _(
                "max_cache_len={length} cannot hold the prompt ({prompt} tokens) plus the {fed_back} new tokens fed "
                "back in the full-attention layers; use at least {needed} (prompt + new - 1, as generate sizes it)."
            ).format(length=max_cache_len, prompt=prompt_tokens, fed_back=needed - prompt_tokens, needed=needed)
        )
    if tokens is not None and max_cache_len < tokens:
        raise CacheOptionError(
            _("max_cache_len={length} cannot hold {tokens} tokens in the full-attention layers").format(
                length=max_cache_len, tokens=tokens
            )
        )


def check_past_recording(cache_kind: str, past_recording: bool) -> None:
    """Past recording keeps evicted tokens until a crop; only DynamicCache layers can do that."""
    if past_recording and cache_kind not in PAST_RECORDING_KINDS:
        kinds = _("{kinds} and {last}").format(
            kinds=", ".join(PAST_RECORDING_KINDS[:-1]), last=PAST_RECORDING_KINDS[-1]
        )
        raise CacheOptionError(
            _(
                "past recording is for {kinds} caches (DynamicCache layers); a {kind!r} cache cannot keep evicted "
                "tokens for a later crop."
            ).format(kinds=kinds, kind=cache_kind)
        )


def check_prompt_length(prompt_tokens: int | None) -> None:
    """An empty prompt is refused (transformers fails deep inside the first forward: "cannot reshape tensor of 0
    elements"). A ValueError, not a CacheOptionError: it is not an option."""
    if prompt_tokens == 0:
        raise ValueError(_("the prompt is empty (0 tokens); give at least one token of text"))


def check_option_names(cache_kind: str, options: dict, require_length: bool = True) -> dict:
    """The options that are set (not None), after refusing any that `cache_kind` does not take. A static kind
    needs its max_cache_len unless `generate` sizes it (`require_length=False`)."""
    given = {k: v for k, v in options.items() if v is not None}
    wrong = sorted(set(given) - set(KIND_OPTIONS[cache_kind]))
    if wrong:
        valid = ", ".join(KIND_OPTIONS[cache_kind]) or _("no options")
        raise CacheOptionError(
            _("cache kind {kind!r} does not take {wrong}; it takes {valid}").format(
                kind=cache_kind, wrong=", ".join(wrong), valid=valid
            )
        )
    if "offload_only_non_sliding" in given and not isinstance(given["offload_only_non_sliding"], bool):
        got = given["offload_only_non_sliding"]
        raise CacheOptionError(_("offload_only_non_sliding must be True or False; got {got!r}").format(got=got))
    if cache_kind in STATIC_KINDS and "max_cache_len" not in given and require_length:
        raise CacheOptionError(
            _(
                "cache kind {kind!r} needs max_cache_len (the slots it pre-allocates per layer); or let generate size "
                "it: kvlab.generate(model, input_ids, cache_implementation={kind!r}, max_new_tokens=...)"
            ).format(kind=cache_kind)
        )
    return given


def check_options(
    cache_kind: str,
    options: dict,
    facts=None,
    *,
    request: Request | None = None,
    tokens: int | None = None,
    kinds: tuple[str, ...] = CACHE_KINDS,
) -> dict:
    """Every rule about a cache of `cache_kind` with `options`; returns the options that are set (not None).

    - `facts`: the model's `ModelFacts` (or its config, read once into them); without them, the rules that need
      the model wait for a later call that has it;
    - `request` (a `kvlab.request.Request`) is what an entry point that generates knows besides: the prompt and new
      tokens a static cache must hold and quanto's groups must divide, the batch, whether `generate` sizes the
      static cache (at max(max_length - 1, max_cache_len) with `length_is_minimum`), past recording;
    - `tokens`: what a static cache must hold in its full-attention layers (the size calculator's count);
    - `kinds`: the cache kinds the caller knows (the size calculator has no "none").
    """
    request = request or Request()
    facts = facts if facts is not None else request.facts
    request = replace(request, cache_kind=cache_kind, options=options, facts=facts)
    return check_request_options(request, tokens=tokens, kinds=kinds)


def check_request_options(request: Request, *, tokens: int | None = None, kinds: tuple[str, ...] = CACHE_KINDS) -> dict:
    """`check_options` on a request whose facts are read: the one pass of `kvlab.rules.check` calls it."""
    facts = request.facts
    check_prompt_length(request.prompt_tokens)
    cache_kind = check_cache_kind(request.cache_kind, kinds)
    given = check_option_names(cache_kind, request.options, require_length=not request.generate_sizes)
    layer_kinds = None if facts is None else list(facts.layer_kinds)
    if cache_kind in STATIC_KINDS:
        prompt = None if request.length_is_minimum else request.prompt_tokens
        check_static_length(given.get("max_cache_len"), prompt, request.new_tokens, layer_kinds, tokens)
    if cache_kind == "quantized":
        if facts is not None and facts.is_encoder_decoder:
            raise CacheOptionError(_("a quantized cache is for decoder-only models; this model is encoder-decoder"))
        _check_quantized_request(given, request)
    if BY_NAME[cache_kind].offloads:
        offload = given.get("offload_only_non_sliding", BY_NAME[cache_kind].defaults["offload_only_non_sliding"])
        check_offloading(facts, bool(offload), cache_kind)
    check_past_recording(cache_kind, request.past_recording)
    return given


def _check_quantized_request(given: dict, request: Request) -> None:
    # the most the cache holds bounds the lengths quanto quantizes at, once the new tokens are known
    cached = request.held_tokens if request.cached_tokens is not None or request.new_tokens > 0 else None
    backend = given.get("backend", DEFAULT_BACKEND)
    quantized = {k: v for k, v in given.items() if k != "backend"}
    check_quantized_options(
        backend,
        request.facts,
        prompt_tokens=request.prompt_tokens,
        cached_tokens=cached,
        batch=request.batch,
        **quantized,
    )
