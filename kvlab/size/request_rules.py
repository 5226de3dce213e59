"""The rules about a request that no cache option fixes: files to write, memory, positions (one `RequestError`).

The memory rule needs the size calculator's bytes (predicted here, below), and the calculator needs the option
rules (`kvlab.caches.options`): so the request rules live here, below both.
"""

from __future__ import annotations

import bisect

from kvlab.atomic import AtomicWriteError, check_writable
from kvlab.cache_kinds import BY_NAME, STATIC_KINDS
from kvlab.errors import KvlabUserError
from kvlab.i18n import N_, _, cache_kind_label, number
from kvlab.model_facts import ModelFacts
from kvlab.names import dtype_name
from kvlab.request import Request
from kvlab.size.architecture import Architecture, from_config
from kvlab.size.calculator import sized


class RequestError(KvlabUserError, ValueError):
    """A request this machine or this model cannot serve, whatever the options: an output that cannot be written,
    a cache bigger than the memory, more positions than the model has. One line; the command line exits 2."""


ALLOW_PAST_POSITIONS = N_("allow_past_positions=True (kvlab run --allow-past-positions) to generate past them anyway")


def available_memory(device="cpu") -> int | None:
    """Bytes free for a new cache on `device` (psutil's available for the CPU and Apple's unified memory, CUDA's
    free); None where kvlab cannot tell, and nothing is refused. The seam tests replace, so none allocates."""
    kind = str(device).split(":")[0]
    if kind == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    if kind in ("cpu", "mps"):
        import psutil

        return int(psutil.virtual_memory().available)
    return None


def check_paths(paths) -> None:
    """Every file the request will write can be written, before any work (None entries are skipped)."""
    for path in paths:
        if path is None:
            continue
        try:
            check_writable(path)
        except AtomicWriteError as err:
            raise RequestError(_("{error}; nothing was run").format(error=err)) from None


def check_positions(
    facts: ModelFacts, prompt_tokens: int | None, cached_tokens: int | None, allow: bool = False
) -> None:
    """A prompt plus new tokens past the model's positions is refused unless `allow`: transformers only warns and
    generates on, with rotary models drifting and learned position tables failing. The decoder's positions are the
    tokens the cache holds (the last new token is never fed back), an encoder's the prompt's."""
    if allow or prompt_tokens is None or cached_tokens is None:
        return
    allow, limit = _(ALLOW_PAST_POSITIONS), facts.encoder_max_positions
    if facts.is_encoder_decoder and limit and prompt_tokens > limit:
        raise RequestError(
            _(
                "the prompt ({prompt} tokens) is longer than this model's encoder positions ({limit}, "
                "max_position_embeddings); valid: a prompt of at most {limit} tokens, or {allow}"
            ).format(prompt=number(prompt_tokens), limit=number(limit), allow=allow)
        )
    needed, limit = cached_tokens, facts.max_positions
    if not limit or needed <= limit:
        return
    if facts.is_encoder_decoder:
        raise RequestError(
            _(
                "{needed} new tokens need {needed} decoder positions, past this model's {limit} "
                "(max_position_embeddings); valid: at most {limit} new tokens, or {allow}"
            ).format(needed=number(needed), limit=number(limit), allow=allow)
        )
    valid = (
        _("at most {n} new tokens with this prompt").format(n=number(limit - prompt_tokens + 1))
        if prompt_tokens <= limit
        else _("a prompt of at most {limit} tokens").format(limit=number(limit))
    )
    raise RequestError(
        _(
            "the prompt ({prompt} tokens) plus {new} new tokens need {needed} positions (the last new token is "
            "not fed back), past this model's {limit} (max_position_embeddings); valid: {valid}, or {allow}"
        ).format(
            prompt=number(prompt_tokens),
            new=number(needed - prompt_tokens + 1),
            needed=number(needed),
            limit=number(limit),
            valid=valid,
            allow=allow,
        )
    )


# -- the memory rule's bytes ----------------------------------------------------------------------------------------
# The most bytes one generation's cache would hold, predicted from the model's config before anything is allocated:
# the size calculator's, so a memory refusal names the bytes `kvlab size` and a trace would show. A request holds at
# most `cached_tokens` (prompt + new - 1; an encoder-decoder's decoder, its new tokens) for `batch` sequences; a
# static kind is sized at its `max_cache_len`. No torch: `kvlab run` predicts before loading.
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
    return sized(arch, cache_kind, length, options, batch=batch, dtype=dtype, **shape).peak_bytes


def requested_length(cache_kind: str, options: dict, cached_tokens: int) -> int:
    """What sizes the cache: a static kind's max_cache_len (generate's own, `cached_tokens`, when none is set),
    any other kind's tokens."""
    if cache_kind in STATIC_KINDS:
        return max(options.get("max_cache_len") or cached_tokens, cached_tokens)
    return cached_tokens


def request_bytes(
    arch: Architecture | None,
    cache_kind: str,
    options: dict,
    *,
    prompt_tokens: int,
    cached_tokens: int,
    batch: int = 1,
    dtype: str = "float32",
) -> int | None:
    """The most bytes the request's cache holds at any point; None where the calculator cannot say (no `arch`:
    a layer kind or state it does not model; a prediction that cannot be made refuses nothing)."""
    if arch is None or cache_kind == "none":
        return None
    length = requested_length(cache_kind, options, cached_tokens)
    try:
        return _peak(arch, cache_kind, options, prompt_tokens, length, batch, dtype)
    except ValueError:  # a size the calculator refuses; the option rules ran before, with the request's facts
        return None


def most_length(
    arch: Architecture | None,
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
    if arch is None:
        return 0
    low = 1 if arch.is_encoder_decoder else prompt_tokens
    lengths = range(low, max(low, requested_length(cache_kind, options, cached_tokens)) + 1)
    fitting = bisect.bisect_right(
        lengths, budget, key=lambda length: _peak(arch, cache_kind, options, prompt_tokens, length, batch, dtype)
    )
    return lengths[fitting - 1] if fitting else 0


def check_memory(request: Request) -> None:
    """A cache bigger than the memory it would live in is refused, naming its bytes and the most that fits.

    The bytes are the size calculator's: a static kind's preallocation, any other kind at the most it grows to.
    An offloaded kind lives in CPU memory; `device=None` (a model spread over devices) checks nothing. A floor,
    not a promise: activations and weights not loaded yet come on top. The request's options are checked.
    """
    facts, cached_tokens = request.facts, request.held_tokens
    kind, prompt_tokens, batch = request.cache_kind, request.prompt_tokens, request.batch
    if kind == "none" or request.device is None:
        return
    options = request.given
    where = "cpu" if BY_NAME[kind].offloads else str(request.device)
    counts = {"prompt_tokens": prompt_tokens, "cached_tokens": cached_tokens, "batch": batch}
    dtype = dtype_name(request.dtype)
    arch = _architecture(facts)  # once: the bytes and the most that fits are both the calculator's
    needed = request_bytes(arch, kind, options, dtype=dtype, **counts)
    available = None if needed is None else available_memory(where)
    if available is None or needed <= available:
        return
    from kvlab.units import human_bytes

    fit = most_length(arch, kind, options, budget=available, dtype=dtype, **counts)
    static = kind in STATIC_KINDS
    advice = _memory_advice(facts, static, options, prompt_tokens, cached_tokens, fit, request.allow_past_positions)
    what = {  # English says "an offloaded cache"; each language has its own article
        (True, True): _("an {kind} cache of {n} slots per layer"),
        (True, False): _("a {kind} cache of {n} slots per layer"),
        (False, True): _("an {kind} cache of {n} tokens"),
        (False, False): _("a {kind} cache of {n} tokens"),
    }[static, kind[0] in "aeiou"]
    length = requested_length(kind, options, cached_tokens)
    what = what.format(kind=cache_kind_label(kind), n=number(length))
    if batch > 1:
        what += _(" x batch {batch}").format(batch=batch)
    place = _("CPU memory") if where.startswith("cpu") else _("{device} memory").format(device=where)
    head = _("{what} needs {needed} ({needed_b} B) and {place} has {available} ({available_b} B) available").format(
        what=what,
        needed=human_bytes(needed, localized=True),
        needed_b=number(needed),
        place=place,
        available=human_bytes(available, localized=True),
        available_b=number(available),
    )
    raise RequestError(f"{head}; {advice}")


def _memory_advice(
    facts: ModelFacts, static: bool, options: dict, prompt_tokens, cached_tokens, fit, positions_allowed
) -> str:
    """What fits: the new tokens (capped by the model's positions unless they may be passed), a static length."""
    if fit == 0:
        return _("not even the prompt's cache fits there; valid: a shorter prompt, a smaller dtype or another device")
    encoder_decoder = facts.is_encoder_decoder
    explicit = static and options.get("max_cache_len") is not None
    if explicit and fit >= cached_tokens:
        return _("valid here: max_cache_len at most {fit}").format(fit=number(fit))
    new_tokens = fit if encoder_decoder else fit - prompt_tokens + 1
    limit = None if positions_allowed else facts.max_positions
    capped = ""
    if limit is not None:
        most = limit if encoder_decoder else limit - prompt_tokens + 1
        if 0 < most < new_tokens:
            new_tokens = most
            capped = _(" (the model's {limit} positions allow no more)").format(limit=number(limit))
    length = _(" and max_cache_len at most {fit}").format(fit=number(fit)) if explicit else ""
    return _("valid here: at most {n} new tokens{capped}{length}").format(
        n=number(new_tokens), capped=capped, length=length
    )


def check_request(request: Request) -> None:
    """Every rule about `request` that no cache option fixes (its options are checked before: `kvlab.rules.check`):
    with the model and the prompt known, its cache fits in memory and its tokens in the model's positions; and the
    files it will write can be written (no model needed)."""
    if request.facts is not None and request.prompt_tokens is not None:
        check_memory(request)
        check_positions(request.facts, request.prompt_tokens, request.held_tokens, request.allow_past_positions)
    check_paths(request.paths)
