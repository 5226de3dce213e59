"""Prefix caching: prefill a shared prefix once, then answer each question from a `copy.deepcopy` of its cache.

`generate(full_ids, cache=copy)` prefills only `full_ids[prefix_tokens:]`, which is right only when the prefix's
ids are a *token* prefix of the full prompt's. Text concatenation does not guarantee it: BPE merges across the
seam, so a prefix ending in a space tokenizes to a lone space token that the full prompt spells as " Why". Plain
transformers then silently drops a token of the question; `check_token_prefix` raises `PrefixMismatchError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.measure.chat import first_mismatch, show_token
from kvlab.measure.timing import Timing, time_interleaved
from kvlab.recording.storage import storage_bytes


class PrefixMismatchError(KvlabUserError, ValueError):
    """The cached prefix's ids are not the first ids of the prompt it is reused for."""


def cache_bytes(cache) -> int:
    """Bytes of the distinct storages held by a cache's layers."""
    return storage_bytes(*[(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers])


def check_token_prefix(prefix_ids, full_ids, tokenizer=None) -> None:
    """Raise PrefixMismatchError unless `prefix_ids` are exactly the first ids of `full_ids` (with room to spare)."""
    prefix, full = list(prefix_ids), list(full_ids)
    for position, (a, b) in enumerate(zip(prefix, full)):
        if a != b:
            raise PrefixMismatchError(
                _(
                    "the cached prefix is not a token prefix of the prompt: at position {position} the prefix has "
                    "{cached} but prefix+question tokenizes to {prompt}. The tokenizer merged across the seam "
                    "(typically a prefix ending in a space); reusing the cache would feed the model a prompt with a "
                    "token missing. End the prefix on a token boundary (no trailing space; a newline or a "
                    "chat-template turn end), or prefill prefix+question without reuse."
                ).format(position=position, cached=show_token(tokenizer, a), prompt=show_token(tokenizer, b))
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
        found = first_mismatch(self.prefix_ids, self.full_ids)  # a prompt no longer than the prefix is one too
        return None if found is None else found.position

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


def _updates_after_copy(trace) -> list[dict]:
    """The kv updates of a `kvlab.watch` trace after its deep copy (`meta["copied_at_event"]`), if it is one."""
    start = trace.meta.get("copied_at_event", 0)
    return [e for e in trace.events[start:] if e.get("type") == "update" and e.get("op") == "kv"]


def tokens_fed_after_copy(trace) -> int:
    """Tokens the first forward after a deep copy wrote into the copy: how much of the prompt it prefilled itself."""
    later = _updates_after_copy(trace)
    if not later:
        return 0
    first = later[0]
    return sum(e["tokens_added"] for e in later if e["step"] == first["step"] and e["layer_idx"] == first["layer_idx"])


@dataclass
class FirstTokenTimes:
    """Time to first token per request with the prefix reused and without it, the deep copy alone, and the exact
    work behind each: tokens the request's forward prefilled, and bytes the deep copy duplicates."""

    with_prefix: list[Timing]  # per request: deep copy + generate(max_new_tokens=1) on the copy
    without_prefix: list[Timing]  # per request: generate(max_new_tokens=1) on the whole prompt
    deep_copy: Timing
    prefilled_with_prefix: list[int]  # per request, from the trace of a watched call
    prefilled_without_prefix: list[int]
    copy_bytes: int  # the prefix cache's bytes, duplicated per request

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

    `with_prefix(request)` is the guide's per-request step, `copy.deepcopy(prefix_cache)` then `generate` on the copy
    with `max_new_tokens=1` (the copy is timed with it: a server pays it per request); `without_prefix(request)` is
    `generate(max_new_tokens=1)` on the whole prompt; `deep_copy()` returns a copy of the prefix cache. Each call runs
    once inside `kvlab.watch(model)` to count the tokens its one forward prefilled (more than one forward would time
    decoding too: refused), then all are timed by `time_interleaved`.
    """
    from kvlab.watcher import watch  # the watcher sits above the measurement layer's recording imports

    if not requests:
        raise ValueError(_("time_first_token needs at least one request"))
    reused_label, whole_label, copy_label = labels
    counts: dict[str, list[int]] = {reused_label: [], whole_label: []}
    for label, call in ((reused_label, with_prefix), (whole_label, without_prefix)):
        for request in requests:
            with watch(model) as seen:
                call(request)
            forwards = len({e["step"] for e in _updates_after_copy(seen.trace)})
            if forwards != 1:
                raise ValueError(
                    _(
                        "{label!r} ran {forwards} forwards; time to first token needs exactly one (generate with "
                        "max_new_tokens=1)"
                    ).format(label=label, forwards=forwards)
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
