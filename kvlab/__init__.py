"""kvlab: see and measure what a transformer's KV cache does.

    import kvlab
    model, tokenizer = kvlab.load("smollm2")
    result = kvlab.run(model, tokenizer, "The KV cache", cache="static", max_cache_len=64, max_new_tokens=16)
    result.trace.summary()
"""

from kvlab._version import __version__
from kvlab.caches import (
    CACHE_KINDS,
    CacheCropError,
    CacheOptionError,
    InstrumentedDynamicCache,
    InstrumentedEncoderDecoderCache,
    InstrumentedOffloadedCache,
    InstrumentedOffloadedStaticCache,
    InstrumentedQuantizedCache,
    InstrumentedStaticCache,
    make_cache,
)
from kvlab.generate import generate
from kvlab.models import BUNDLED, UnknownModelError, load, prepare
from kvlab.models.tiny import TINY_MODELS, tiny_model
from kvlab.run import RunResult, run
from kvlab.trace import Trace, TraceFormatError
from kvlab.watch import NoCacheSeenError, Watch, watch



def explore(*args, **kwargs):
    """The Cache Explorer (ipywidgets); imported on first use so `import kvlab` stays light."""
    from kvlab.explorer import explore as _explore

    return _explore(*args, **kwargs)


__all__ = [
    "BUNDLED",
    "CACHE_KINDS",
    "CacheCropError",
    "CacheOptionError",
    "InstrumentedDynamicCache",
    "InstrumentedEncoderDecoderCache",
    "InstrumentedOffloadedCache",
    "InstrumentedOffloadedStaticCache",
    "InstrumentedQuantizedCache",
    "InstrumentedStaticCache",
    "NoCacheSeenError",
    "RunResult",
    "TINY_MODELS",
    "Trace",
    "TraceFormatError",
    "UnknownModelError",
    "Watch",
    "explore",
    "generate",
    "load",
    "make_cache",
    "prepare",
    "run",
    "tiny_model",
    "watch",
]
