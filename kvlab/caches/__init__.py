"""Instrumented drop-in replacements for every transformers cache kind.

Imported on first use (`kvlab.lazy`), so `options` and `crop_rules` load without torch or transformers.
"""

from typing import TYPE_CHECKING

from kvlab import lazy

if TYPE_CHECKING:  # the exports (kvlab.lazy reads them)
    from kvlab.caches.base import InstrumentedCacheMixin  # noqa: F401
    from kvlab.caches.crop_rules import CacheCropError  # noqa: F401
    from kvlab.caches.encoder_decoder import InstrumentedEncoderDecoderCache  # noqa: F401
    from kvlab.caches.factory import CACHE_CLASSES, make_cache  # noqa: F401
    from kvlab.caches.kinds import (  # noqa: F401
        InstrumentedDynamicCache,
        InstrumentedOffloadedCache,
        InstrumentedOffloadedStaticCache,
        InstrumentedStaticCache,
    )
    from kvlab.caches.options import (  # noqa: F401
        CACHE_KINDS,
        KIND_OPTIONS,
        CacheOptionError,
        check_options,
        check_quantized_options,
    )
    from kvlab.caches.quantized import InstrumentedQuantizedCache, PaddedHQQQuantizedLayer  # noqa: F401

__getattr__, __dir__ = lazy.exports(__name__)
