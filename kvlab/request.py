"""One generation request: what an entry point knows before any work, read once, checked once (`kvlab.rules`).

A plain value with no rules of its own, so the rules below it take it as an argument: the model's config is read
into `ModelFacts` here, once, and every rule reads the same facts. A field left unknown (no model yet, no prompt
yet) leaves its rules to a later check that knows it: the command line checks before the config loads, then again
before the weights do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvlab.model_facts import ModelFacts, model_facts, tokens_held


@dataclass(frozen=True)
class Request:
    cache_kind: str | type = "dynamic"  # a kind name, or a strategy: a layer class, or "FILE.py:ClassName"
    options: dict = field(default_factory=dict)  # the cache's (None values are unset)
    facts: ModelFacts | None = None  # the model's, or its config (read into facts once, here)
    prompt_tokens: int | None = None
    new_tokens: int = 0
    cached_tokens: int | None = None  # `generate`'s own count (max_length - 1), once it has fixed it
    batch: int = 1  # sequences: beams and returned sequences included
    past_recording: bool = False  # the caller will call `cache.activate_past_recording()`
    paths: tuple = ()  # files the request will write (a trace, a report)
    dtype: object = "float32"  # of the cache, and `device`, where it lives: the memory rule's
    device: object = "cpu"
    allow_past_positions: bool = False
    generate_sizes: bool = False  # `generate` sizes a static cache that has no max_cache_len
    length_is_minimum: bool = False  # max_cache_len goes to `generate`, which sizes at least max_length - 1

    def __post_init__(self):
        if self.facts is not None:
            object.__setattr__(self, "facts", model_facts(self.facts))

    @property
    def given(self) -> dict:
        """The options that are set (None values are unset)."""
        return {k: v for k, v in self.options.items() if v is not None}

    @property
    def held_tokens(self) -> int | None:
        """The most tokens the cache holds: `generate`'s own count where it gave one, else prompt + new - 1 (an
        encoder-decoder's decoder: its new tokens); None before the prompt is known."""
        if self.cached_tokens is not None:
            return self.cached_tokens
        if self.prompt_tokens is None:
            return None
        encoder_decoder = self.facts is not None and self.facts.is_encoder_decoder
        return tokens_held(self.prompt_tokens, self.new_tokens, encoder_decoder)

    def as_kind(self, cache_kind: str, options: dict | None = None) -> Request:
        """The same request for another cache kind: a strategy's is a dynamic cache's, the most it could hold."""
        return replace(self, cache_kind=cache_kind, options=options or {})
