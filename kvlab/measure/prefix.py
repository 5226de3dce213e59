"""Prefix caching: prefill a shared prefix (a system prompt, a document) once, then answer many questions.

Each question gets a `copy.deepcopy` of the prefilled cache, because generating into a cache changes it.
`generate(full_ids, cache=copy)` then prefills only `full_ids[prefix_tokens:]`. That is only right when the
prefix's ids are a *token* prefix of the full prompt's ids. Text concatenation does not guarantee it: BPE merges
across the seam, so a prefix ending in a space ("Question: " + "Why?") tokenizes to a lone space token that the
full prompt spells as " Why". Plain transformers then drops a token of the question without a word; kvlab
checks the ids and raises `PrefixMismatchError` instead.

`token_prefix` lines up the ids of a prefix and of prefix + question (notebook 08 draws it); `tokens_fed_after_copy`
reads, from a `kvlab.watch` trace of a deep copy, how many tokens that answer had to run itself. The notebook runs
the guide's recipe itself (`StaticCache`, `torch.no_grad()` forward, `copy.deepcopy`, `generate`); `prefill_prefix`
and `answer` are the same steps packaged with single readings of their times.

`time_first_token` measures what reuse saves: the caller's own two per-request calls (the guide's
`copy.deepcopy(prefix_cache)` + `generate(max_new_tokens=1)`, and `generate(max_new_tokens=1)` on the whole prompt)
and the deep copy alone, repeated and interleaved by `kvlab.measure.timing`, beside the exact work each call did:
the tokens its one forward prefilled (from a `kvlab.watch` trace) and the bytes the copy duplicates.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import LogitsProcessorList

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.measure import timing
from kvlab.measure.chat import FirstTokenClock
from kvlab.measure.timing import Comparison, Stopwatch, Timing, compare, time_interleaved
from kvlab.pad_token import pad_token_id
from kvlab.recorded_run import encode  # the one tokenising of a prompt: (1, tokens) ids
from kvlab.recording.storage import storage_bytes


class PrefixMismatchError(KvlabUserError, ValueError):
    """The cached prefix's ids are not the first ids of the prompt it is reused for."""


@dataclass
class PrefixCache:
    """A cache prefilled with `text` and never generated into: copy it, do not use it directly."""

    text: str
    ids: list[int]
    cache: object
    seconds: float  # the prefill

    @property
    def bytes(self) -> int:
        return cache_bytes(self.cache)


@dataclass(frozen=True)
class Answer:
    question: str
    token_ids: tuple[int, ...]
    text: str
    prompt_tokens: int
    prefilled_tokens: int  # what this answer's generate computed before its first new token
    seconds: float  # deep copy (if any) + generate
    first_token_seconds: float  # deep copy (if any) + prefill: the part that reuse saves
    copy_bytes: int  # storage of this answer's private copy of the prefix cache


def cache_bytes(cache) -> int:
    """Bytes of the distinct storages held by a cache's layers."""
    seen: set = set()
    return sum(
        storage_bytes(getattr(layer, "keys", None), getattr(layer, "values", None), seen=seen) for layer in cache.layers
    )


def prefill_prefix(model, tokenizer, text: str, cache: str = "dynamic", **cache_options) -> PrefixCache:
    """One forward over the prefix into a fresh cache of `cache` kind (e.g. "static", max_cache_len=...)."""
    ids = encode(tokenizer, text).to(model.device)
    kv = make_cache(cache, model.config, **cache_options)
    with Stopwatch() as watch, torch.inference_mode():
        model(ids, use_cache=True, **{_compat.CACHE_KWARG: kv})
    return PrefixCache(text, ids[0].tolist(), kv, watch.seconds)


def check_token_prefix(prefix_ids, full_ids, tokenizer=None) -> None:
    """Raise PrefixMismatchError unless `prefix_ids` are exactly the first ids of `full_ids` (with room to spare)."""
    prefix, full = list(prefix_ids), list(full_ids)
    for position, (a, b) in enumerate(zip(prefix, full)):
        if a != b:

            def show(token_id):
                return (
                    f"{tokenizer.decode([token_id])!r} (id {token_id})" if tokenizer is not None else f"id {token_id}"
                )

            raise PrefixMismatchError(
                _(
                    "the cached prefix is not a token prefix of the prompt: at position {position} the prefix has "
                    "{cached} but prefix+question tokenizes to {prompt}. The tokenizer merged across the seam "
                    "(typically a prefix ending in a space); reusing the cache would feed the model a prompt with a "
                    "token missing. End the prefix on a token boundary (no trailing space; a newline or a "
                    "chat-template turn end), or prefill prefix+question without reuse."
                ).format(position=position, cached=show(a), prompt=show(b))
            )
    if len(full) <= len(prefix):
        raise PrefixMismatchError(
            _(
                "the prompt ({prompt_tokens} tokens) adds nothing after the cached prefix ({prefix_tokens} tokens); "
                "generate needs at least one uncached token."
            ).format(prompt_tokens=len(full), prefix_tokens=len(prefix))
        )


@dataclass(frozen=True)
class TokenPrefix:
    """The ids of a prefix alone and of prefix + question, side by side: is the first a prefix of the second?"""

    prefix_ids: tuple[int, ...]
    full_ids: tuple[int, ...]
    prefix_tokens: tuple[str, ...]
    full_tokens: tuple[str, ...]

    @property
    def mismatch(self) -> int | None:
        """The first position where the prefix's ids and the full prompt's ids differ (None if none does)."""
        for position, (a, b) in enumerate(zip(self.prefix_ids, self.full_ids)):
            if a != b:
                return position
        return None if len(self.full_ids) > len(self.prefix_ids) else len(self.full_ids)

    @property
    def ok(self) -> bool:
        """True when reusing a cache of the prefix for prefix + question feeds the model the right ids."""
        return self.mismatch is None


def token_prefix(tokenizer, prefix: str, question: str) -> TokenPrefix:
    """Tokenize `prefix` and `prefix + question` the way the guide's recipe does, and line the ids up."""
    prefix_ids = tokenizer(prefix).input_ids
    full_ids = tokenizer(prefix + question).input_ids
    return TokenPrefix(
        tuple(prefix_ids),
        tuple(full_ids),
        tuple(tokenizer.convert_ids_to_tokens(prefix_ids)),
        tuple(tokenizer.convert_ids_to_tokens(full_ids)),
    )


def tokens_fed_after_copy(trace) -> int:
    """Tokens the first forward after a deep copy wrote into the copy (from a `kvlab.watch` trace with
    `meta["copied_from"]`): how much of the prompt that answer had to prefill itself."""
    start = trace.meta.get("copied_at_event", 0)
    later = [e for e in trace.events[start:] if e.get("type") == "update" and e.get("op") == "kv"]
    if not later:
        return 0
    first_step = later[0]["step"]
    return sum(e["tokens_added"] for e in later if e["step"] == first_step and e["layer_idx"] == later[0]["layer_idx"])


def answer(
    model, tokenizer, prefix: PrefixCache, question: str, max_new_tokens: int = 16, check: bool = True
) -> Answer:
    """Greedy answer to `prefix.text + question`, reusing a deep copy of the prefilled cache.

    `check=False` does what plain transformers does: trusts that the prefix ids line up.
    """
    full = encode(tokenizer, prefix.text + question)  # (1, prompt_tokens)
    if check:
        check_token_prefix(prefix.ids, full[0].tolist(), tokenizer)
    clock = FirstTokenClock()
    kv = copy.deepcopy(prefix.cache)
    copied = cache_bytes(kv)
    ids = full.to(model.device)
    with torch.inference_mode():
        output = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_token_id(tokenizer, model),
            logits_processor=LogitsProcessorList([clock]),
            **{_compat.CACHE_KWARG: kv},
        )
    seconds = timing.clock() - clock.started
    new = output[0, full.shape[-1] :].tolist()
    return Answer(
        question,
        tuple(new),
        tokenizer.decode(new, skip_special_tokens=True),
        full.shape[-1],
        full.shape[-1] - len(prefix.ids),
        seconds,
        clock.first_token - clock.started,
        copied,
    )


@dataclass
class FirstTokenTimes:
    """Time to first token per request with the prefix reused and without it, the deep copy alone, and the exact
    work behind each: tokens the request's forward prefilled, and bytes the deep copy duplicates."""

    with_prefix: list[Timing]  # per request: deep copy + generate(max_new_tokens=1) on the copy
    without_prefix: list[Timing]  # per request: generate(max_new_tokens=1) on the whole prompt
    deep_copy: Timing  # the deep copy of the prefix cache alone
    prefilled_with_prefix: list[int]  # per request, from the trace of a watched call
    prefilled_without_prefix: list[int]
    copy_bytes: int  # storage of one deep copy: the prefix cache's bytes, duplicated per request

    def comparison(self, request: int) -> Comparison:
        """with the prefix / without it, for one request: `.verdict()` says whether reuse was faster."""
        return compare(self.without_prefix[request], self.with_prefix[request], warn=False)

    def copy_share(self, request: int) -> Comparison:
        """deep copy / (deep copy + generate) for one request: the share of the reused time spent copying."""
        return compare(self.with_prefix[request], self.deep_copy, warn=False)

    def series(self) -> dict[str, list[tuple[int, Timing]]]:
        """`{label: [(tokens prefilled, Timing), ...]}` for `kvlab.plots.prefill_bars.plot_prefill_bars`."""
        return {
            self.with_prefix[0].label: list(zip(self.prefilled_with_prefix, self.with_prefix)),
            self.without_prefix[0].label: list(zip(self.prefilled_without_prefix, self.without_prefix)),
        }


def time_first_token(
    model,
    with_prefix: Callable[[object], object],
    without_prefix: Callable[[object], object],
    deep_copy: Callable[[], object],
    requests: Sequence,
    repeats: int = 10,
    warmup: int = 1,
    labels: tuple[str, str, str] = ("with the prefix", "without it", "deepcopy"),
) -> FirstTokenTimes:
    """Time to first token of each request, with a reused prefix and without, interleaved, and the copy alone.

    `with_prefix(request)` is the guide's per-request step: `copy.deepcopy(prefix_cache)`, then `generate` with the
    copy and `max_new_tokens=1` (the copy is timed with it: a server pays it per request); `without_prefix(request)`
    is `generate(max_new_tokens=1)` on the whole prompt; `deep_copy()` copies the prefix cache and returns the copy.
    Each is first run once inside `kvlab.watch(model)` to count the tokens its one forward prefilled (a call that
    runs more than one forward is refused: it would time decoding too); then every request's two calls and the
    deep copy are timed by `time_interleaved`, `repeats` times each after `warmup` untimed calls.
    """
    from kvlab.watcher import watch  # the watcher sits above the measurement layer's recording imports

    if not requests:
        raise ValueError("time_first_token needs at least one request")
    reused_label, whole_label, copy_label = labels
    counts: dict[str, list[int]] = {reused_label: [], whole_label: []}
    for label, call in ((reused_label, with_prefix), (whole_label, without_prefix)):
        for request in requests:
            with watch(model) as seen:
                call(request)
            steps = _forwards_after_copy(seen.trace)
            if len(steps) != 1:
                raise ValueError(
                    f"{label!r} ran {len(steps)} forwards; time to first token needs exactly one "
                    "(generate with max_new_tokens=1)"
                )
            counts[label].append(tokens_fed_after_copy(seen.trace))
    copy_bytes = cache_bytes(deep_copy())
    runs: dict[str, Callable[[], object]] = {copy_label: deep_copy}
    for i, request in enumerate(requests):
        runs[f"{i}\0{reused_label}"] = lambda request=request: with_prefix(request)
        runs[f"{i}\0{whole_label}"] = lambda request=request: without_prefix(request)
    timed = time_interleaved(runs, repeats=repeats, warmup=warmup)
    return FirstTokenTimes(
        [Timing(reused_label, timed[f"{i}\0{reused_label}"].times) for i in range(len(requests))],
        [Timing(whole_label, timed[f"{i}\0{whole_label}"].times) for i in range(len(requests))],
        timed[copy_label],
        counts[reused_label],
        counts[whole_label],
        copy_bytes,
    )


def _forwards_after_copy(trace) -> list[int]:
    """The steps (forwards) of a trace after its deep copy, if it is one."""
    start = trace.meta.get("copied_at_event", 0)
    return sorted({e["step"] for e in trace.events[start:] if e.get("type") == "update" and e.get("op") == "kv"})
