"""Every rule about a request that no cache option fixes, checked before any model work.

`check_request(config, cache_kind, options, prompt_tokens=..., max_new_tokens=..., ...)` runs after the option rules
in `kvlab.request.Request.check`, the one check of every entry point that generates. Its refusals are one
`RequestError`:
- an output file that cannot be written (`check_paths`; it used to be found after the generation, report lost);
- a cache bigger than the memory it would live in (`check_memory`: the bytes from the size calculator, for every
  kind, a dynamic one at the most it would grow to; the memory from `available_memory`, the seam tests replace);
- a prompt plus new tokens past the model's positions (`check_positions`, max_position_embeddings: transformers
  only warns, and a 9,000-token prompt ran to the end on a model of 8,192 positions), unless explicitly allowed.

The memory rule needs the size calculator's prediction of a cache's bytes (`kvlab.size.request`), and the size
calculator needs the option rules (`kvlab.caches.options`): so the request rules live here, below both.
"""

from __future__ import annotations

from kvlab.atomic import AtomicWriteError, check_writable
from kvlab.cache_kinds import BY_NAME, STATIC_KINDS
from kvlab.errors import KvlabUserError
from kvlab.i18n import N_, _, number
from kvlab.model_facts import ModelFacts, model_facts, tokens_held
from kvlab.names import dtype_name
from kvlab.size import request as predicted


class RequestError(KvlabUserError, ValueError):
    """A request this machine or this model cannot serve, whatever the options: an output that cannot be written,
    a cache bigger than the memory, more positions than the model has. One line; the command line exits 2."""


ALLOW_PAST_POSITIONS = N_("allow_past_positions=True (kvlab run --allow-past-positions) to generate past them anyway")


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
            raise RequestError(_("{error}; nothing was run").format(error=err)) from None


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
    allow = _(ALLOW_PAST_POSITIONS)
    for what, needed, limit in _positions_needed(facts, prompt_tokens, cached_tokens):
        if what == "encoder":
            raise RequestError(
                _(
                    "the prompt ({prompt} tokens) is longer than this model's encoder positions ({limit}, "
                    "max_position_embeddings); valid: a prompt of at most {limit} tokens, or {allow}"
                ).format(prompt=number(prompt_tokens), limit=number(limit), allow=allow)
            )
        if facts.is_encoder_decoder:
            raise RequestError(
                _(
                    "{needed} new tokens need {needed} decoder positions, past this model's {limit} "
                    "(max_position_embeddings); valid: at most {limit} new tokens, or {allow}"
                ).format(needed=number(needed), limit=number(limit), allow=allow)
            )
        new_tokens = needed - prompt_tokens + 1
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
                new=number(new_tokens),
                needed=number(needed),
                limit=number(limit),
                valid=valid,
                allow=allow,
            )
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
    facts = model_facts(config)
    where = "cpu" if BY_NAME[cache_kind].offloads else str(device)
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
    vowel = cache_kind[0] in "aeiou"  # English says "an offloaded cache"; each language has its own article
    if static and vowel:
        what = _("an {kind} cache of {n} slots per layer")
    elif static:
        what = _("a {kind} cache of {n} slots per layer")
    elif vowel:
        what = _("an {kind} cache of {n} tokens")
    else:
        what = _("a {kind} cache of {n} tokens")
    what = what.format(kind=cache_kind, n=number(length))
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
    advice = _memory_advice(facts, static, options, prompt_tokens, cached_tokens, fit, positions_allowed)
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
        cached_tokens = tokens_held(prompt_tokens, max_new_tokens, facts.is_encoder_decoder)
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
