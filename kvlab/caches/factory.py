"""Build an instrumented cache by name, with the names and options of `cache_implementation`/`cache_config`."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.dynamic import InstrumentedDynamicCache
from kvlab.caches.encoder_decoder import InstrumentedEncoderDecoderCache
from kvlab.caches.offloaded import InstrumentedOffloadedCache, InstrumentedOffloadedStaticCache
from kvlab.caches.options import (
    QUANTIZED_OPTIONS,
    CacheOptionError,
    check_cache_kind,
    check_offloading,
    check_static_length,
)
from kvlab.caches.quantized import InstrumentedQuantizedCache
from kvlab.caches.static import InstrumentedStaticCache
from kvlab.trace import Trace

CACHE_CLASSES = {
    "dynamic": InstrumentedDynamicCache,
    "static": InstrumentedStaticCache,
    "offloaded": InstrumentedOffloadedCache,
    "offloaded_static": InstrumentedOffloadedStaticCache,
    "quantized": InstrumentedQuantizedCache,
}
# The options each kind takes (beyond `config` and `trace`).
KIND_OPTIONS = {
    "none": (),
    "dynamic": (),
    "static": ("max_cache_len",),
    "offloaded": ("offload_only_non_sliding",),
    "offloaded_static": ("max_cache_len", "offload_only_non_sliding"),
    "quantized": ("backend", *QUANTIZED_OPTIONS),
}


def check_options(kind: str, options: dict, require_length: bool = True) -> dict:
    """The options that are set, after refusing any that `kind` does not take.

    `require_length=False` where `generate` sizes a static cache itself (`kvlab.generate`, `kvlab run`): a
    cache built here, by name alone, needs its max_cache_len.
    """
    check_cache_kind(kind)
    given = {k: v for k, v in options.items() if v is not None}
    wrong = sorted(set(given) - set(KIND_OPTIONS[kind]))
    if wrong:
        valid = ", ".join(KIND_OPTIONS[kind]) or "no options"
        raise CacheOptionError(f"cache kind {kind!r} does not take {', '.join(wrong)}; it takes {valid}")
    if "offload_only_non_sliding" in given and not isinstance(given["offload_only_non_sliding"], bool):
        got = given["offload_only_non_sliding"]
        raise CacheOptionError(f"offload_only_non_sliding must be True or False; got {got!r}")
    if kind in ("static", "offloaded_static"):
        if "max_cache_len" not in given and require_length:
            raise CacheOptionError(
                f"cache kind {kind!r} needs max_cache_len (the slots it pre-allocates per layer); or let generate "
                f"size it: kvlab.generate(model, input_ids, cache_implementation={kind!r}, max_new_tokens=...)"
            )
        check_static_length(given.get("max_cache_len"))
    return given


def make_cache(kind: str, config, *, trace: Trace | None = None, cache_config: dict | None = None, **options):
    """An instrumented cache of `kind` for a model `config`; None for kind "none" (use_cache=False).

    `cache_config` takes the same dict as `generate(cache_config=...)`; keyword options are merged over it.
    """
    given = check_options(kind, {**(cache_config or {}), **options})
    if kind == "none":
        return None
    cls = CACHE_CLASSES[kind]
    if kind == "quantized":
        if getattr(config, "is_encoder_decoder", False):
            raise CacheOptionError("a quantized cache is for decoder-only models; this model is encoder-decoder")
        backend = given.pop("backend", "quanto")  # transformers' default backend
        return cls(backend, config.get_text_config(decoder=True), trace=trace, **given)
    if kind in _compat.OFFLOAD_ONLY_NON_SLIDING_DEFAULTS:
        default = _compat.OFFLOAD_ONLY_NON_SLIDING_DEFAULTS[kind]
        check_offloading(config, given.get("offload_only_non_sliding", default), kind)
    if getattr(config, "is_encoder_decoder", False):
        return InstrumentedEncoderDecoderCache.from_config(config, cls, trace=trace, **given)
    return cls(config=config.get_text_config(decoder=True), trace=trace, **given)
