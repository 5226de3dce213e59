"""Instrumented drop-in replacements for every transformers cache kind.

The names below are imported on first use, so that `kvlab.caches.options` (every option rule, which `kvlab size`
and the command line use before any model exists) and `kvlab.caches.crop_rules` (every crop rule) can be imported
without torch or transformers.
"""

import importlib

_EXPORTS = {
    "CacheCropError": "crop_rules",
    "InstrumentedCacheMixin": "base",
    "InstrumentedDynamicCache": "dynamic",
    "InstrumentedEncoderDecoderCache": "encoder_decoder",
    "CACHE_CLASSES": "factory",
    "KIND_OPTIONS": "options",
    "check_options": "options",
    "make_cache": "factory",
    "InstrumentedOffloadedCache": "offloaded",
    "InstrumentedOffloadedStaticCache": "offloaded",
    "CACHE_KINDS": "options",
    "CacheOptionError": "options",
    "check_quantized_options": "options",
    "InstrumentedQuantizedCache": "quantized",
    "PaddedHQQQuantizedLayer": "quantized",
    "InstrumentedStaticCache": "static",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
