"""Multi-turn chat on one reused cache, and the check that the cache still matches the prompt.

`generate(ids, cache=cache)` prefills only `ids[cache_length:]`, *assuming* the cache holds the first ids. A chat
template that renders earlier turns differently from how they were generated (Qwen3-style templates drop past
`<think>` blocks; a reply can re-tokenize into other ids) breaks that silently. `ChatSession` remembers the ids it
fed into the cache and compares them with every new prompt.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from kvlab.caches import make_cache
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.measure import timing
from kvlab.measure.step_times import greedy_generate
from kvlab.recording.trace import Trace

ON_MISMATCH = ("raise", "warn", "crop", "ignore")

# ChatML shaped like Qwen3's with thinking disabled: the generation prompt opens an empty think block, and earlier
# assistant turns are rendered without it, so turn 1's generated ids are not what the template renders in turn 2.
THINK_DROPPING_TEMPLATE = (
    "{% for message in messages %}"
    "{% set content = message['content'] %}"
    "{% if message['role'] == 'assistant' and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}{% endif %}"
)


class CacheMismatchError(KvlabUserError, ValueError):
    """The ids a cache holds are not a prefix of the prompt it is about to be reused for."""


@dataclass(frozen=True)
class Mismatch:
    """Where a reused cache and a new prompt disagree."""

    position: int  # first cached id that differs from the prompt's (or where the prompt ends)
    cached_tokens: int
    prompt_tokens: int
    cached_id: int | None
    prompt_id: int | None

    def describe(self, tokenizer=None) -> str:
        def show(token_id):
            return _("nothing (the prompt ends here)") if token_id is None else show_token(tokenizer, token_id)

        return _(
            "the cache holds {cached_tokens} tokens, but the new prompt differs from them at position {position}: "
            "cached {cached}, prompt {prompt}. generate() would prefill only prompt[{cached_tokens}:] and attend to "
            "keys and values of tokens that are no longer in the prompt. Crop the cache to the common prefix "
            "(cache.crop(-{stale})) or start a fresh cache."
        ).format(
            cached_tokens=self.cached_tokens,
            position=self.position,
            cached=show(self.cached_id),
            prompt=show(self.prompt_id),
            stale=self.cached_tokens - self.position,
        )


def show_token(tokenizer, token_id: int) -> str:
    """ "' How' (id 1012)" with a tokenizer, "id 1012" without."""
    return f"{tokenizer.decode([token_id])!r} (id {token_id})" if tokenizer is not None else f"id {token_id}"


def first_mismatch(cached_ids, prompt_ids) -> Mismatch | None:
    """None if `cached_ids` is a prefix of `prompt_ids` (the cache can be reused), else where they part; a prompt no
    longer than the cache is a mismatch too (generate needs at least one uncached token)."""
    cached, prompt = _as_list(cached_ids), _as_list(prompt_ids)
    for position, (c, p) in enumerate(zip(cached, prompt)):
        if c != p:
            return Mismatch(position, len(cached), len(prompt), c, p)
    if len(prompt) <= len(cached):
        n = len(prompt)
        return Mismatch(n, len(cached), n, cached[n] if n < len(cached) else None, None)
    return None


def _as_list(ids) -> list[int]:
    if isinstance(ids, torch.Tensor):
        if ids.dim() == 2 and ids.shape[0] != 1:
            raise ValueError(_("expected one sequence, got a batch of {batch}").format(batch=ids.shape[0]))
        ids = ids.reshape(-1).tolist()
    return [int(i) for i in ids]


@dataclass(frozen=True)
class Turn:
    index: int
    prompt_tokens: int  # the whole conversation so far, as the template renders it
    reused_tokens: int  # tokens whose keys and values came from the cache
    prefilled_tokens: int  # tokens the first forward of this turn computed (from the trace)
    new_tokens: int
    seconds: float
    prefill_seconds: float  # time to the first new token
    reply: str
    reply_ids: tuple[int, ...]
    mismatch: Mismatch | None = None


class ChatSession:
    """A greedy conversation with `model`, one user message at a time; `reuse=False` builds a fresh cache each turn.

    `on_mismatch`, when the cached ids are not a prefix of the new prompt: "raise" (CacheMismatchError), "warn",
    "crop" (drop the cache's stale tail, prefill from there) or "ignore" (what plain transformers does).
    """

    def __init__(
        self,
        model,
        tokenizer,
        cache: str = "dynamic",
        reuse: bool = True,
        max_new_tokens: int = 32,
        chat_template: str | None = None,
        on_mismatch: str = "raise",
        system: str | None = None,
        **cache_options,
    ):
        if on_mismatch not in ON_MISMATCH:
            valid = ", ".join(ON_MISMATCH)
            raise ValueError(
                _("on_mismatch={on_mismatch!r}; valid: {valid}").format(on_mismatch=on_mismatch, valid=valid)
            )
        if chat_template is None and tokenizer.chat_template is None:
            raise ValueError(_("this tokenizer has no chat template; pass chat_template="))
        self.model, self.tokenizer = model, tokenizer
        self.cache_kind, self.cache_options = cache, cache_options
        self.reuse, self.max_new_tokens = reuse, max_new_tokens
        self.chat_template, self.on_mismatch = chat_template, on_mismatch
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []
        self.trace = Trace()
        self.cache = None
        self.cached_ids: list[int] = []  # the ids whose keys and values `self.cache` holds
        self.turns: list[Turn] = []

    def prompt_ids(self) -> torch.Tensor:
        """The whole conversation rendered by the template, ready for the assistant: (1, tokens)."""
        encoded = self.tokenizer.apply_chat_template(
            self.messages, chat_template=self.chat_template, add_generation_prompt=True, return_tensors="pt"
        )
        # transformers 5 returns a BatchEncoding here (return_dict defaults to True)
        return encoded["input_ids"] if not isinstance(encoded, torch.Tensor) else encoded

    def ask(self, content: str) -> Turn:
        self.messages.append({"role": "user", "content": content})
        ids = self.prompt_ids().to(self.model.device)  # (1, prompt_tokens)
        mismatch = None
        if not self.reuse or self.cache is None:
            self.cache = make_cache(self.cache_kind, self.model.config, trace=self.trace, **self.cache_options)
            self.cached_ids = []
        else:
            mismatch = first_mismatch(self.cached_ids, ids)
            if mismatch is not None:
                self._handle(mismatch)
        reused = len(self.cached_ids)
        events_before = len(self.trace.events)
        clock = timing.DecodeClock()  # generate's streamer: its first stamp ends the prefill
        pad = self.tokenizer.pad_token_id
        output = greedy_generate(self.model, ids, self.max_new_tokens, self.cache, pad_token_id=pad, streamer=clock)
        reply_ids = output[0, ids.shape[-1] :].tolist()
        reply = self.tokenizer.decode(reply_ids, skip_special_tokens=True)
        self.cached_ids = output[0, : self.cache.get_seq_length()].tolist()  # the last new token was never fed back
        first = next(e for e in self.trace.events[events_before:] if e["type"] == "update")
        turn = Turn(
            len(self.turns),
            ids.shape[-1],
            reused,
            first["tokens_added"],
            len(reply_ids),
            clock.ended - clock.started,
            clock.prefill_seconds,
            reply,
            tuple(reply_ids),
            mismatch,
        )
        self.turns.append(turn)
        self.messages.append({"role": "assistant", "content": reply})
        return turn

    def _handle(self, mismatch: Mismatch) -> None:
        if self.on_mismatch == "raise":
            self.messages.pop()  # leave the conversation as it was before this turn
            raise CacheMismatchError(mismatch.describe(self.tokenizer))
        if self.on_mismatch == "warn":
            warnings.warn(mismatch.describe(self.tokenizer), stacklevel=3)
        elif self.on_mismatch == "crop":
            keep = min(mismatch.position, mismatch.prompt_tokens - 1)  # generate needs one uncached token
            self.cache.crop(keep - len(self.cached_ids))
            self.cached_ids = self.cached_ids[:keep]


def turn_prefills(trace: Trace) -> list[int]:
    """Tokens each `generate` call (turn) prefilled into the cache this trace records: the first layer's first
    update and every later one that adds more than one token (a turn feeds at least the new user message)."""
    first_layer = [e for e in trace.updates if e["op"] == "kv" and e["role"] == "self" and e["layer_idx"] == 0]
    return [e["tokens_added"] for i, e in enumerate(first_layer) if i == 0 or e["tokens_added"] > 1]
