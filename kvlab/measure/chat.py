"""Multi-turn chat on one reused cache, and the check that the cache still matches the prompt.

Reusing a cache across turns works because `generate(ids, cache=cache)` prefills only `ids[cache_length:]`:
it *assumes* the first `cache_length` ids are the tokens whose keys and values the cache holds. Nothing checks
that. A chat template that renders earlier turns differently from how they were generated (Qwen3-style
templates drop the `<think>...</think>` block of past assistant turns; a reply can also re-tokenize into other
ids) breaks the assumption, and the model silently attends to keys and values of tokens that are no longer in
the prompt. `ChatSession` remembers the ids it fed into the cache and compares them with every new prompt.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.measure import timing
from kvlab.recording.trace import Trace

ON_MISMATCH = ("raise", "warn", "crop", "ignore")

# ChatML like SmolLM2's template, but shaped like Qwen3's with thinking disabled: the generation prompt opens the
# assistant turn with an empty think block, and earlier assistant turns are rendered *without* their think block.
# So the ids generated in turn 1 (which follow the think block) are not the ids the template renders in turn 2.
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

    position: int  # first position whose cached id differs from the prompt id (or where the prompt ends)
    cached_tokens: int
    prompt_tokens: int
    cached_id: int | None
    prompt_id: int | None

    def describe(self, tokenizer=None) -> str:
        def show(token_id):
            if token_id is None:
                return _("nothing (the prompt ends here)")
            return f"{tokenizer.decode([token_id])!r} (id {token_id})" if tokenizer is not None else f"id {token_id}"

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


def first_mismatch(cached_ids, prompt_ids) -> Mismatch | None:
    """None if `cached_ids` is a prefix of `prompt_ids` (the cache can be reused), else where they part.

    A prompt no longer than the cache is a mismatch too: generate needs at least one uncached token to feed.
    """
    cached = _as_list(cached_ids)
    prompt = _as_list(prompt_ids)
    for position, (c, p) in enumerate(zip(cached, prompt)):
        if c != p:
            return Mismatch(position, len(cached), len(prompt), c, p)
    if len(prompt) <= len(cached):
        position = len(prompt) if len(prompt) < len(cached) else len(cached)
        cached_id = cached[position] if position < len(cached) else None
        return Mismatch(position, len(cached), len(prompt), cached_id, None)
    return None


def _as_list(ids) -> list[int]:
    if isinstance(ids, torch.Tensor):
        if ids.dim() == 2:
            if ids.shape[0] != 1:
                raise ValueError(f"expected one sequence, got a batch of {ids.shape[0]}")
            ids = ids[0]
        return [int(i) for i in ids.tolist()]
    return [int(i) for i in ids]


@dataclass(frozen=True)
class Turn:
    """One turn of a chat: how many tokens were prefilled, how many came from the cache, and the reply."""

    index: int
    prompt_tokens: int  # the whole conversation so far, as the template renders it
    reused_tokens: int  # tokens whose keys and values came from the cache
    prefilled_tokens: int  # tokens the first forward of this turn computed (measured from the trace)
    new_tokens: int
    seconds: float
    prefill_seconds: float  # time to the first new token: the prefill this turn paid for
    reply: str
    reply_ids: tuple[int, ...]
    mismatch: Mismatch | None = None


class FirstTokenClock(LogitsProcessor):
    """Notes when generate first asks for logits: the end of the prefill. Leaves the scores untouched."""

    def __init__(self):
        self.started = timing.clock()
        self.first_token: float | None = None

    def __call__(self, input_ids, scores):
        if self.first_token is None:
            self.first_token = timing.clock()
        return scores


class ChatSession:
    """A conversation with `model`, one user message at a time, greedy.

    `reuse=True` keeps one cache for the whole conversation; `reuse=False` builds a fresh cache every turn.
    `on_mismatch` says what to do when the cached ids are not a prefix of the new prompt: "raise"
    (CacheMismatchError), "warn", "crop" (drop the stale tail of the cache, then prefill from there) or
    "ignore" (what plain transformers does: reuse the cache anyway).
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
            raise ValueError(
                _("on_mismatch={on_mismatch!r}; valid: {valid}").format(
                    on_mismatch=on_mismatch, valid=", ".join(ON_MISMATCH)
                )
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
        self.cached_ids: list[int] = []  # the ids whose keys and values `self.cache` holds, in order
        self.turns: list[Turn] = []

    def prompt_ids(self) -> torch.Tensor:
        """The whole conversation rendered by the template, ready for the assistant: (1, tokens)."""
        encoded = self.tokenizer.apply_chat_template(
            self.messages, chat_template=self.chat_template, add_generation_prompt=True, return_tensors="pt"
        )
        # transformers 5 returns a BatchEncoding here (return_dict defaults to True)
        return encoded["input_ids"] if not isinstance(encoded, torch.Tensor) else encoded

    def _new_cache(self):
        return make_cache(self.cache_kind, self.model.config, trace=self.trace, **self.cache_options)

    def ask(self, content: str) -> Turn:
        self.messages.append({"role": "user", "content": content})
        ids = self.prompt_ids().to(self.model.device)  # (1, prompt_tokens)
        mismatch = None
        if not self.reuse or self.cache is None:
            self.cache, self.cached_ids = self._new_cache(), []
        else:
            mismatch = first_mismatch(self.cached_ids, ids)
            if mismatch is not None:
                self._handle(mismatch)
        reused = len(self.cached_ids)
        events_before = len(self.trace.events)
        clock = FirstTokenClock()
        with torch.inference_mode():
            output = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                logits_processor=LogitsProcessorList([clock]),
                **{_compat.CACHE_KWARG: self.cache},
            )
        seconds = timing.clock() - clock.started
        reply_ids = output[0, ids.shape[-1] :].tolist()
        reply = self.tokenizer.decode(reply_ids, skip_special_tokens=True)
        # The last generated token was never fed back, so the cache holds one id fewer than the output.
        self.cached_ids = output[0, : self.cache.get_seq_length()].tolist()
        first = next(e for e in self.trace.events[events_before:] if e["type"] == "update")
        turn = Turn(
            len(self.turns),
            ids.shape[-1],
            reused,
            first["tokens_added"],
            len(reply_ids),
            seconds,
            clock.first_token - clock.started,
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


def chat(model, tokenizer, questions: list[str], **session_options) -> ChatSession:
    """Run `questions` as consecutive user turns; the session holds the turns, the cache and the trace."""
    session = ChatSession(model, tokenizer, **session_options)
    for question in questions:
        session.ask(question)
    return session


def turn_prefills(trace: Trace) -> list[int]:
    """Tokens each `generate` call prefilled into the cache this trace records, one number per call (turn).

    Read from the first layer's model updates: a call starts with one forward that feeds every uncached prompt
    token, then decodes one token per forward. So a call starts at the trace's first update and at every update
    that adds more than one token (a chat turn always feeds at least the new user message).
    """
    first_layer = [e for e in trace.updates if e["op"] == "kv" and e["role"] == "self" and e["layer_idx"] == 0]
    return [e["tokens_added"] for i, e in enumerate(first_layer) if i == 0 or e["tokens_added"] > 1]
