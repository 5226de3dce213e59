"""Every rule about cache kinds and options, in one module that every entry point calls.

`check_options(cache_kind, options, config=None, prompt_tokens=None, max_new_tokens=0, ...)` is the one check:
`make_cache`, `kvlab.run`, `kvlab.generate`, the size calculator, the Cache Explorer's
session, the `kvlab run` command and the bench all call it, with what they know (a model config or only an
architecture's layer kinds, the prompt length, the new tokens), and get the same one-line `CacheOptionError` for
the same mistake. It applies, in order: the prompt is not empty, the kind is known, the kind takes each option
(`KIND_OPTIONS`), offload_only_non_sliding is a bool, a static kind has a max_cache_len that holds the prompt (and
the new tokens in its full-attention layers), the quantized backend's nbits/axes/group size and layer kinds, the
offloading has a layer to offload, and past recording is for a kind that can record. The rule functions below are
its parts, usable alone.

`check_request(config, cache_kind, options, prompt_tokens=..., max_new_tokens=..., ...)` is the second check, for
what no cache option fixes, called by every entry point that generates (`kvlab.run`, `kvlab.generate`, the
explorer's session, `kvlab run`; the command line before the weights load). Its refusals are one `RequestError`:
- an output file that cannot be written (`check_paths`; it used to be found after the generation, report lost);
- a cache bigger than the memory it would live in (`check_memory`: the bytes from the size calculator, for every
  kind, a dynamic one at the most it would grow to; the memory from `available_memory`, the seam tests replace);
- a prompt plus new tokens past the model's positions (`check_positions`, max_position_embeddings: transformers
  only warns, and a 9,000-token prompt ran to the end on a model of 8,192 positions), unless explicitly allowed.

What the rules know of a model (its layer kinds, KV shapes, windows, positions) is `kvlab.model_facts`, read once
per check, and only by a rule that needs it; wherever a check takes a model `config` it takes its `ModelFacts` as
well, so an entry point that read them passes them on instead of having each check read them again.

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
from kvlab.atomic import AtomicWriteError, check_writable
from kvlab.cache_kinds import CACHE_KINDS, DEFAULT_QUANTIZED_BACKEND, KIND_OPTIONS, QUANTIZED_OPTIONS
from kvlab.errors import KvlabUserError
from kvlab.model_facts import ModelFacts, model_facts
from kvlab.names import dtype_name

# The options each kind takes (beyond `config` and `trace`).
STATIC_KINDS = ("static", "offloaded_static")
# Kinds whose layers can record the past (DynamicCache-based: their sliding layers grow until a crop).
PAST_RECORDING_KINDS = ("dynamic", "offloaded")


class CacheOptionError(KvlabUserError, ValueError):
    """An invalid cache kind, option or combination."""


class PagedLayoutError(CacheOptionError):
    """A model whose paged cache kvlab neither instruments nor sizes: layers other than full attention."""


def check_paged_layers(kinds: list[str] | tuple[str, ...], name: str) -> None:
    """The paged cache's one model rule, for the caches, the watcher, the explorer and `kvlab size`: transformers'
    PagedAttentionCache keeps one block allocator per attention type, and kvlab records (and sizes) the
    full-attention one only, so any other layer kind is refused before anything runs."""
    others = sorted({kind for kind in kinds if kind != "full"})
    if others:
        raise PagedLayoutError(
            "kvlab instruments transformers' paged cache, and sizes its layout, for models whose layers are all full "
            f"attention; {name} has {', '.join(others)} layers ({list(kinds).count('full')} of {len(kinds)} full). "
            "Plain model.generate_batch(...) still runs it."
        )


class RequestError(KvlabUserError, ValueError):
    """A request this machine or this model cannot serve, whatever the options: an output that cannot be written,
    a cache bigger than the memory, more positions than the model has. One line; the command line exits 2."""


def check_cache_kind(cache_kind: str, kinds: tuple[str, ...] = CACHE_KINDS) -> str:
    """`cache_kind` if it is one of `kinds` (the size calculator passes its own: it has no "none")."""
    if cache_kind not in kinds:
        raise CacheOptionError(f"unknown cache kind {cache_kind!r}; valid kinds: {', '.join(kinds)}")
    return cache_kind


def _describe_kinds(kinds: list[str], window: int | None) -> str:
    counts = {layer_kind: kinds.count(layer_kind) for layer_kind in dict.fromkeys(kinds)}
    text = ", ".join(f"{n} {layer_kind}" for layer_kind, n in counts.items())
    return f"its {len(kinds)} layers are {text}" + (
        f" (sliding window {window})" if window and "sliding" in counts else ""
    )


def _describe_layers(facts: ModelFacts) -> str:
    return _describe_kinds(list(facts.layer_kinds), facts.sliding_window)


def _facts(config) -> ModelFacts | None:
    """The model's facts, read once per check (None without a model: the rules that need them are skipped)."""
    return None if config is None else model_facts(config)


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

    With the model's `config` (or its `ModelFacts`), group sizes are checked against its shapes; with
    `prompt_tokens` (and `cached_tokens`, the most tokens the cache will hold: prompt + new tokens - 1) also at
    every length the cache will quantize, for `batch` sequences (beams and returned sequences included).
    """
    facts = _facts(config)
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
    if facts is not None:
        check_quantized_layers(list(facts.layer_kinds), facts.sliding_window)
    if backend != "fp8":
        settings = {**_compat.QUANTIZED_DEFAULTS, **given}
        _check_group_size(backend, facts, settings, prompt_tokens, cached_tokens, batch)


def quantized_lengths(prompt_tokens: int, residual_length: int, cached_tokens: int | None = None) -> list[int]:
    """The sequence lengths a QuantizedLayer quantizes at, as far as they matter for divisibility.

    It quantizes the whole prefill, then everything whenever its residual fills: at prompt + k x residual_length
    tokens. A group size that divides the values at the prompt and at the first flush divides them at every later
    flush too (the difference is k times the same residual), so two lengths decide; one when the cache never
    reaches its first flush (`cached_tokens`, when known).
    """
    first_flush = prompt_tokens + residual_length
    return [prompt_tokens] + ([first_flush] if cached_tokens is None or cached_tokens >= first_flush else [])


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _check_group_size(
    backend: str, facts: ModelFacts | None, settings: dict, prompt_tokens, cached_tokens, batch: int
) -> None:
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
    if facts is None or prompt_tokens is None:
        return  # quanto's groups depend on the lengths: checked where they are known (run, generate, the CLI)
    heads, head_dim = facts.kv_heads, facts.head_dim
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


def check_offloading(config, offload_only_non_sliding: bool, cache_kind: str = "offloaded") -> None:
    """Refuse offloading that has no layer to offload: transformers' prefetch raises mid-generation.

    Offloaded layers are the attention layers that are not sliding when `offload_only_non_sliding`
    (transformers' default for offloaded_static, not for offloaded); linear-attention layers never are.
    `config` is the model's config or its `ModelFacts`.
    """
    if config is None or not offload_only_non_sliding:
        return
    facts = model_facts(config)
    flags = facts.layer_flags  # (attention, sliding) per layer
    if any(attention for attention, _ in flags) and not any(attention and not sliding for attention, sliding in flags):
        raise CacheOptionError(
            f"{cache_kind} with offload_only_non_sliding=True offloads only the non-sliding attention layers, and this "
            f"model has none ({_describe_layers(facts)}): transformers' prefetch would fail in the first forward "
            "('True is not in list'). "
            "Valid here: offload_only_non_sliding=False (offload every layer), or a cache that does not offload."
        )


def check_static_length(
    max_cache_len: int | None,
    prompt_tokens: int | None = None,
    new_tokens: int | None = None,
    layer_kinds: list[str] | None = None,
    tokens: int | None = None,
) -> None:
    """A static cache must fit the prompt, and its full-attention layers (sliding ones keep a window) every token.

    With `prompt_tokens` (and `new_tokens`), as `kvlab.run` counts: slots for the prompt plus the new tokens
    generate feeds back (all but the last); with
    `tokens`, as the size calculator counts: slots for the tokens the cache holds. The full-attention rule needs
    the model's `layer_kinds`.
    """
    if max_cache_len is None:
        return
    if not isinstance(max_cache_len, int) or max_cache_len < 1:
        raise CacheOptionError(f"max_cache_len must be a positive integer; got {max_cache_len!r}")
    # generate never feeds its last new token back, so it writes prompt + new - 1 positions: the size it picks
    # itself (max_length - 1) is the smallest one accepted here.
    needed = prompt_tokens + max((new_tokens or 0) - 1, 0) if prompt_tokens is not None else None
    if prompt_tokens is not None and max_cache_len < prompt_tokens:
        raise CacheOptionError(
            f"max_cache_len={max_cache_len} is below the prompt length ({prompt_tokens} tokens); use at least "
            f"{needed} to hold the prompt and the new tokens fed back (prompt + new - 1, as generate sizes it)."
        )
    if not layer_kinds or "full" not in layer_kinds:
        return
    if needed is not None and max_cache_len < needed:
        raise CacheOptionError(
            f"max_cache_len={max_cache_len} cannot hold the prompt ({prompt_tokens} tokens) plus the "
            f"{max((new_tokens or 0) - 1, 0)} new tokens fed back in the full-attention layers; use at least "
            f"{needed} (prompt + new - 1, as generate sizes it)."
        )
    if tokens is not None and max_cache_len < tokens:
        raise CacheOptionError(
            f"max_cache_len={max_cache_len} cannot hold {tokens} tokens in the full-attention layers"
        )


def check_past_recording(cache_kind: str, past_recording: bool) -> None:
    """Past recording keeps evicted tokens until a crop; only DynamicCache layers can do that."""
    if past_recording and cache_kind not in PAST_RECORDING_KINDS:
        raise CacheOptionError(
            f"past recording is for {' and '.join(PAST_RECORDING_KINDS)} caches (DynamicCache layers); a "
            f"{cache_kind!r} cache cannot keep evicted tokens for a later crop."
        )


def check_prompt_length(prompt_tokens: int | None) -> None:
    """An empty prompt is refused (transformers fails deep inside the first forward: "cannot reshape tensor of 0
    elements"). A ValueError, not a CacheOptionError: it is not an option."""
    if prompt_tokens == 0:
        raise ValueError("the prompt is empty (0 tokens); give at least one token of text")


def check_option_names(cache_kind: str, options: dict, require_length: bool = True) -> dict:
    """The options that are set (not None), after refusing any that `cache_kind` does not take.

    `require_length=False` where `generate` sizes a static cache itself (`kvlab.generate`, `kvlab run`): a
    cache built by name alone (`make_cache`, the size calculator, the explorer) needs its max_cache_len.
    """
    given = {k: v for k, v in options.items() if v is not None}
    wrong = sorted(set(given) - set(KIND_OPTIONS[cache_kind]))
    if wrong:
        valid = ", ".join(KIND_OPTIONS[cache_kind]) or "no options"
        raise CacheOptionError(f"cache kind {cache_kind!r} does not take {', '.join(wrong)}; it takes {valid}")
    if "offload_only_non_sliding" in given and not isinstance(given["offload_only_non_sliding"], bool):
        got = given["offload_only_non_sliding"]
        raise CacheOptionError(f"offload_only_non_sliding must be True or False; got {got!r}")
    if cache_kind in STATIC_KINDS and "max_cache_len" not in given and require_length:
        raise CacheOptionError(
            f"cache kind {cache_kind!r} needs max_cache_len (the slots it pre-allocates per layer); or let generate "
            f"size it: kvlab.generate(model, input_ids, cache_implementation={cache_kind!r}, max_new_tokens=...)"
        )
    return given


def check_options(
    cache_kind: str,
    options: dict,
    config=None,
    *,
    prompt_tokens: int | None = None,
    max_new_tokens: int = 0,
    require_length: bool = True,
    length_is_minimum: bool = False,
    past_recording: bool = False,
    cached_tokens: int | None = None,
    batch: int = 1,
    layer_kinds: list[str] | None = None,
    sliding_window: int | None = None,
    tokens: int | None = None,
    kinds: tuple[str, ...] = CACHE_KINDS,
) -> dict:
    """Every rule about a cache of `cache_kind` with `options`; returns the options that are set (not None).

    Each entry point passes what it knows; a rule whose facts are missing is left to the call that has them:
    - `config` (the model's, or its `ModelFacts`): its layer kinds, shapes and encoder-decoder flag, read once by
      the first rule that needs them; without it, `layer_kinds` and `sliding_window` (an architecture's, for the
      size calculator) give the layer kinds alone;
    - `prompt_tokens` and `max_new_tokens`: an empty prompt is refused, a static cache must hold the prompt plus
      the new tokens, quanto's group size must divide what it quantizes at those lengths (`cached_tokens`, the
      most tokens the cache holds, defaults to prompt + new - 1; `batch` counts beams and returned sequences);
    - `tokens`: the tokens a static cache must hold in its full-attention layers (the size calculator's count);
    - `require_length=False` where transformers' `generate` sizes a static cache without max_cache_len;
      `length_is_minimum=True` where max_cache_len goes to `generate` itself, which sizes the cache at
      max(max_length - 1, max_cache_len): it need not hold the prompt;
    - `past_recording`: whether the caller will call `cache.activate_past_recording()`;
    - `kinds`: the cache kinds the caller knows (the size calculator has no "none").
    """
    check_prompt_length(prompt_tokens)
    check_cache_kind(cache_kind, kinds)
    given = check_option_names(cache_kind, options, require_length)
    facts = None  # the model's, read by the first rule that needs them
    if cache_kind in STATIC_KINDS:
        prompt = None if length_is_minimum else prompt_tokens
        if layer_kinds is None and config is not None and (prompt is not None or tokens is not None):
            facts = model_facts(config)
            layer_kinds = list(facts.layer_kinds)
        check_static_length(given.get("max_cache_len"), prompt, max_new_tokens, layer_kinds, tokens)
    if cache_kind == "quantized":
        facts = _facts(config)
        if facts is not None and facts.is_encoder_decoder:
            raise CacheOptionError("a quantized cache is for decoder-only models; this model is encoder-decoder")
        if cached_tokens is None and prompt_tokens is not None and max_new_tokens > 0:
            cached_tokens = prompt_tokens + max_new_tokens - 1  # the last new token is never fed back
        quantized = {k: v for k, v in given.items() if k != "backend"}
        backend = given.get("backend", DEFAULT_QUANTIZED_BACKEND)
        check_quantized_options(
            backend, facts, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens, batch=batch, **quantized
        )
        if facts is None and layer_kinds is not None:  # with a config, check_quantized_options read its layers
            check_quantized_layers(list(layer_kinds), sliding_window)
    if cache_kind in _compat.OFFLOAD_ONLY_NON_SLIDING_DEFAULTS:
        default = _compat.OFFLOAD_ONLY_NON_SLIDING_DEFAULTS[cache_kind]
        offload = given.get("offload_only_non_sliding", default)
        check_offloading(facts if facts is not None else config, offload, cache_kind)
    check_past_recording(cache_kind, past_recording)
    return given


# -- requests: what no cache option fixes (`check_request`) ------------------------------------------------------
ALLOW_PAST_POSITIONS = "allow_past_positions=True (kvlab run --allow-past-positions) to generate past them anyway"


def available_memory(device="cpu") -> int | None:
    """Bytes free for a new cache on `device`: what psutil calls available for the CPU (and Apple's unified memory),
    what CUDA reports free on that GPU; None where kvlab cannot tell (then nothing is refused).

    The one seam of the memory rule: tests replace it (`monkeypatch.setattr(options, "available_memory", ...)`),
    so no test allocates what it refuses."""
    kind = str(device).split(":")[0]
    if kind == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    if kind in ("cpu", "mps"):
        try:
            import psutil  # installed with accelerate
        except ImportError:
            return None
        return int(psutil.virtual_memory().available)
    return None


def check_paths(paths) -> None:
    """Every file the request will write (a trace, a report) can be written: refused before any work, where it used
    to be found after the generation, with the report lost. None entries are skipped."""
    for path in paths:
        if path is None:
            continue
        try:
            check_writable(path)
        except AtomicWriteError as err:
            raise RequestError(f"{err}; nothing was run") from None


def _positions_needed(facts: ModelFacts, prompt_tokens: int, cached_tokens: int) -> list[tuple[str, int, int]]:
    """(what, positions needed, limit) for each position limit the request passes: the decoder's positions are the
    tokens the cache holds (the last new token is never fed back), an encoder's are the prompt's."""
    over = []
    if facts.is_encoder_decoder:
        limit = facts.encoder_max_positions
        if limit and prompt_tokens > limit:
            over.append(("encoder", prompt_tokens, limit))
    limit = facts.max_positions
    if limit and cached_tokens > limit:
        over.append(("decoder", cached_tokens, limit))
    return over


def check_positions(config, prompt_tokens: int | None, cached_tokens: int | None, allow: bool = False) -> None:
    """A prompt plus new tokens past the model's positions is refused unless `allow`: transformers only warns
    ("friendly reminder") and generates on, with rotary models drifting and learned position tables failing.
    `config` is the model's config or its `ModelFacts`."""
    if allow or config is None or prompt_tokens is None or cached_tokens is None:
        return
    facts = model_facts(config)
    for what, needed, limit in _positions_needed(facts, prompt_tokens, cached_tokens):
        if what == "encoder":
            raise RequestError(
                f"the prompt ({prompt_tokens:,} tokens) is longer than this model's encoder positions ({limit:,}, "
                f"max_position_embeddings); valid: a prompt of at most {limit:,} tokens, or {ALLOW_PAST_POSITIONS}"
            )
        if facts.is_encoder_decoder:
            raise RequestError(
                f"{needed:,} new tokens need {needed:,} decoder positions, past this model's {limit:,} "
                f"(max_position_embeddings); valid: at most {limit:,} new tokens, or {ALLOW_PAST_POSITIONS}"
            )
        new_tokens = needed - prompt_tokens + 1
        valid = (
            f"at most {limit - prompt_tokens + 1:,} new tokens with this prompt"
            if prompt_tokens <= limit
            else f"a prompt of at most {limit:,} tokens"
        )
        raise RequestError(
            f"the prompt ({prompt_tokens:,} tokens) plus {new_tokens:,} new tokens need {needed:,} positions (the last "
            f"new token is not fed back), past this model's {limit:,} (max_position_embeddings); valid: {valid}, "
            f"or {ALLOW_PAST_POSITIONS}"
        )


def check_memory(
    config,
    cache_kind: str,
    options: dict,
    *,
    prompt_tokens: int | None,
    cached_tokens: int | None,
    batch: int = 1,
    dtype="float32",
    device="cpu",
    positions_allowed: bool = False,
) -> None:
    """A cache bigger than the memory it would live in is refused, naming the bytes it needs and the most that fits.

    The bytes are the size calculator's prediction (`kvlab.size.request`): a static kind's preallocation, any other
    kind at the most it would grow to (prompt + new tokens). An offloaded kind lives in CPU memory whatever the
    model's device. `device=None` (a model spread over several devices) checks nothing. It is a floor, not a
    promise: the cache alone must fit; activations and the weights (when not loaded yet) come on top. `config` is
    the model's config or its `ModelFacts`.
    """
    if config is None or prompt_tokens is None or cached_tokens is None or cache_kind == "none" or device is None:
        return
    from kvlab.size import request as predicted  # here, not at the top: the size calculator imports this module

    facts = model_facts(config)
    where = "cpu" if cache_kind.startswith("offloaded") else str(device)
    request = {"prompt_tokens": prompt_tokens, "cached_tokens": cached_tokens, "batch": batch}
    dtype = dtype_name(dtype)
    needed = predicted.request_bytes(facts, cache_kind, options, dtype=dtype, **request)
    if needed is None:
        return
    available = available_memory(where)
    if available is None or needed <= available:
        return
    from kvlab.units import human_bytes

    fit = predicted.most_length(facts, cache_kind, options, budget=available, dtype=dtype, **request)
    length = predicted.requested_length(cache_kind, options, cached_tokens)
    static = cache_kind in STATIC_KINDS
    article = "an" if cache_kind[0] in "aeiou" else "a"
    what = (
        f"{article} {cache_kind} cache of {length:,} slots per layer"
        if static
        else f"{article} {cache_kind} cache of {length:,} tokens"
    )
    place = "CPU memory" if where.startswith("cpu") else f"{where} memory"
    head = (
        f"{what}{f' x batch {batch}' if batch > 1 else ''} needs {human_bytes(needed)} ({needed:,} B) and {place} has "
        f"{human_bytes(available)} ({available:,} B) available"
    )
    raise RequestError(
        f"{head}; {_memory_advice(facts, static, options, prompt_tokens, cached_tokens, fit, positions_allowed)}"
    )


def _memory_advice(
    facts: ModelFacts, static: bool, options: dict, prompt_tokens, cached_tokens, fit, positions_allowed
) -> str:
    """What fits: the new tokens (capped by the model's positions unless they may be passed), a static length."""
    if fit == 0:
        return "not even the prompt's cache fits there; valid: a shorter prompt, a smaller dtype or another device"
    encoder_decoder = facts.is_encoder_decoder
    explicit = static and options.get("max_cache_len") is not None
    if explicit and fit >= cached_tokens:
        return f"valid here: max_cache_len at most {fit:,}"
    new_tokens = fit if encoder_decoder else fit - prompt_tokens + 1
    limit = None if positions_allowed else facts.max_positions
    capped = ""
    if limit is not None:
        most = limit if encoder_decoder else limit - prompt_tokens + 1
        if 0 < most < new_tokens:
            new_tokens, capped = most, f" (the model's {limit:,} positions allow no more)"
    length = f" and max_cache_len at most {fit:,}" if explicit else ""
    return f"valid here: at most {new_tokens:,} new tokens{capped}{length}"


def check_request(
    config=None,
    cache_kind: str = "dynamic",
    options: dict | None = None,
    *,
    prompt_tokens: int | None = None,
    max_new_tokens: int = 0,
    cached_tokens: int | None = None,
    batch: int = 1,
    dtype="float32",
    device="cpu",
    allow_past_positions: bool = False,
    paths=(),
) -> None:
    """Every rule about a request that no cache option fixes; each entry point passes what it knows, in order:
    - `paths`: the files it will write are writable (no model needed: the command line checks them first);
    - with the model's `config` (or its `ModelFacts`, read once here otherwise) and `prompt_tokens`: the cache fits
      in `device`'s memory (for `batch` sequences of `dtype`), and the positions hold the prompt plus
      `max_new_tokens` unless `allow_past_positions`.
    `cached_tokens` is the most tokens the cache holds (default: prompt + new - 1, or the new tokens for an
    encoder-decoder model); `generate` passes its own (max_length - 1). `options` are the cache's (a static
    kind's max_cache_len is the length it allocates; without one, `generate` sizes it at `cached_tokens`).
    """
    check_paths(paths)
    if config is None or prompt_tokens is None:
        return
    facts = model_facts(config)
    if cached_tokens is None:
        new_tokens = max(max_new_tokens, 1)
        cached_tokens = new_tokens if facts.is_encoder_decoder else prompt_tokens + new_tokens - 1
    given = {k: v for k, v in (options or {}).items() if v is not None}
    check_memory(
        facts,
        cache_kind,
        given,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        batch=batch,
        dtype=dtype,
        device=device,
        positions_allowed=allow_past_positions,
    )
    check_positions(facts, prompt_tokens, cached_tokens, allow_past_positions)
