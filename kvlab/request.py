"""One generation request, checked once, before any work, by every entry point that generates.

A field left unknown (no model yet, no prompt yet) leaves its rules to a later check that knows it: the command
line checks before the config loads, then again before the weights do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvlab.caches.options import check_options
from kvlab.model_facts import ModelFacts, model_facts
from kvlab.size.request_rules import check_request
from kvlab.strategies.load import check_strategy, is_strategy


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

    def check(self) -> dict:
        """The option rules, then the request's (files, memory, positions); returns the options that are set.

        A strategy (`cache_kind` a layer class or "FILE.py:ClassName") is loaded and checked with its options (the
        layer's keyword arguments); the rest of its request is a dynamic cache's, the most it could hold."""
        if is_strategy(self.cache_kind):
            _layer_class, given = check_strategy(self.cache_kind, self.options, self.facts)
            as_dynamic = replace(self, cache_kind="dynamic", options={})
            check_options("dynamic", {}, self.facts, request=as_dynamic)
            check_request(as_dynamic)
            return given
        given = check_options(self.cache_kind, self.options, self.facts, request=self)
        check_request(self)
        return given
