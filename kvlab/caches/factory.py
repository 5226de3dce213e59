"""Build an instrumented cache by name, with the names and options of `cache_implementation`/`cache_config`."""

from __future__ import annotations

from kvlab.caches.encoder_decoder import InstrumentedEncoderDecoderCache
from kvlab.caches.kinds import INSTRUMENTED
from kvlab.caches.options import check_options
from kvlab.caches.strategy import CheckedStrategyCache
from kvlab.model_facts import ModelFacts, model_facts
from kvlab.quantized_backends import DEFAULT_BACKEND
from kvlab.recording.trace import Trace
from kvlab.strategies.load import check_strategy, is_strategy, layer_factory, strategy_facts

__all__ = ["CACHE_CLASSES", "build_cache", "make_cache"]

CACHE_CLASSES = INSTRUMENTED  # the class `make_cache` builds for each name


def make_cache(cache_kind, config, *, trace: Trace | None = None, cache_config: dict | None = None, **options):
    """An instrumented cache of `cache_kind` for a model `config` (or its `ModelFacts`, `kvlab.model_facts`, which
    hold the config they were read from); None for cache kind "none" (use_cache=False).

    `cache_kind` is a kind name ("dynamic"), or a strategy: a transformers layer class of the user's (a `DynamicLayer`
    subclass) or "FILE.py:ClassName", built as `Cache(layer_class_to_replicate=...)` with the options as the layer's
    keyword arguments, each update checked (`kvlab.caches.strategy.CheckedStrategyCache`).
    `cache_config` takes the same dict as `generate(cache_config=...)`; keyword options are merged over it.
    """
    options = {**(cache_config or {}), **options}
    if not is_strategy(cache_kind):  # a strategy's options are its layer's, checked as the layer class is loaded
        options = check_options(cache_kind, options, config)  # every option rule, in one place
    return build_cache(cache_kind, config, options, trace=trace)


def build_cache(cache_kind, config, given: dict, *, trace: Trace | None = None):
    """`make_cache` with the options a checked request returned (`kvlab.rules.check`), not checked again."""
    if is_strategy(cache_kind):  # a layer class of the user's, or "FILE.py:ClassName"
        return _strategy_cache(cache_kind, config, trace, given)
    if cache_kind == "none":
        return None
    if isinstance(config, ModelFacts):
        config = config.config  # the transformers config the facts were read from
    cls = CACHE_CLASSES[cache_kind]
    if cache_kind == "quantized":
        given = dict(given)
        backend = given.pop("backend", DEFAULT_BACKEND)
        return cls(backend, config.get_text_config(decoder=True), trace=trace, **given)
    if getattr(config, "is_encoder_decoder", False):
        return InstrumentedEncoderDecoderCache.from_config(config, cls, trace=trace, **given)
    return cls(config=config.get_text_config(decoder=True), trace=trace, **given)


def _strategy_cache(strategy, config, trace: Trace | None, options: dict):
    """`Cache(layer_class_to_replicate=...)` of a strategy's layer class, instrumented and checked."""
    facts = model_facts(config)
    layer_class, given = check_strategy(strategy, options, facts)
    config = facts.config  # the transformers config the facts were read from
    factory = layer_factory(layer_class, given)
    if getattr(config, "is_encoder_decoder", False):  # the strategy for the decoder's self-attention
        cache = InstrumentedEncoderDecoderCache.from_config(
            config, CheckedStrategyCache, trace=trace, layer_class_to_replicate=factory
        )
    else:
        cache = CheckedStrategyCache(
            layer_class_to_replicate=factory, config=config.get_text_config(decoder=True), trace=trace
        )
    cache.trace.meta["strategy"] = strategy_facts(layer_class, given)
    return cache
