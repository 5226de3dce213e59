"""Instrumented drop-in replacements for every transformers cache kind."""

from kvlab.caches.base import CacheCropError, InstrumentedCacheMixin
from kvlab.caches.dynamic import InstrumentedDynamicCache
from kvlab.caches.encoder_decoder import InstrumentedEncoderDecoderCache
from kvlab.caches.factory import CACHE_CLASSES, KIND_OPTIONS, check_options, make_cache
from kvlab.caches.offloaded import InstrumentedOffloadedCache, InstrumentedOffloadedStaticCache
from kvlab.caches.options import CACHE_KINDS, CacheOptionError, check_quantized_options
from kvlab.caches.quantized import InstrumentedQuantizedCache, PaddedHQQQuantizedLayer
from kvlab.caches.static import InstrumentedStaticCache

__all__ = [
    "CACHE_CLASSES",
    "CACHE_KINDS",
    "KIND_OPTIONS",
    "CacheCropError",
    "CacheOptionError",
    "InstrumentedCacheMixin",
    "InstrumentedDynamicCache",
    "InstrumentedEncoderDecoderCache",
    "InstrumentedOffloadedCache",
    "InstrumentedOffloadedStaticCache",
    "InstrumentedQuantizedCache",
    "InstrumentedStaticCache",
    "PaddedHQQQuantizedLayer",
    "check_options",
    "check_quantized_options",
    "make_cache",
]
