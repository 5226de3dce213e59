"""kvlab: see and measure what a transformer's KV cache does.

    import kvlab
    model, tokenizer = kvlab.load("smollm2")
    result = kvlab.run(model, tokenizer, "The KV cache", cache="static", max_cache_len=64, max_new_tokens=16)
    result.trace.summary()

`import kvlab` is light: the names below are imported on first use (PEP 562), so `kvlab --help`, `kvlab size`
and `import kvlab` itself do not pay for torch and transformers until something needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING

from kvlab._version import __version__

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these are imported on first use
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
    from kvlab.i18n import current_language, set_language
    from kvlab.models import BUNDLED, UnknownModelError, load, prepare
    from kvlab.models.tiny import TINY_MODELS, tiny_model
    from kvlab.recorded_run import RunResult, run
    from kvlab.recording.trace import Trace, TraceFormatError
    from kvlab.watched_generate import generate
    from kvlab.watcher import NoCacheSeenError, Watch, watch

# public name -> the module that defines it
_EXPORTS = {
    "CACHE_KINDS": "kvlab.caches",
    "CacheCropError": "kvlab.caches",
    "CacheOptionError": "kvlab.caches",
    "InstrumentedDynamicCache": "kvlab.caches",
    "InstrumentedEncoderDecoderCache": "kvlab.caches",
    "InstrumentedOffloadedCache": "kvlab.caches",
    "InstrumentedOffloadedStaticCache": "kvlab.caches",
    "InstrumentedQuantizedCache": "kvlab.caches",
    "InstrumentedStaticCache": "kvlab.caches",
    "make_cache": "kvlab.caches",
    "set_language": "kvlab.i18n",
    "current_language": "kvlab.i18n",
    "BUNDLED": "kvlab.models",
    "UnknownModelError": "kvlab.models",
    "load": "kvlab.models",
    "prepare": "kvlab.models",
    "TINY_MODELS": "kvlab.models.tiny",
    "tiny_model": "kvlab.models.tiny",
    "RunResult": "kvlab.recorded_run",
    "run": "kvlab.recorded_run",
    "Trace": "kvlab.recording.trace",
    "TraceFormatError": "kvlab.recording.trace",
    "NoCacheSeenError": "kvlab.watcher",
    "Watch": "kvlab.watcher",
    "watch": "kvlab.watcher",
    "generate": "kvlab.watched_generate",
}


def explore(*args, **kwargs):
    """The Cache Explorer (ipywidgets); imported on first use so `import kvlab` stays light."""
    from kvlab.explorer import explore as _explore

    return _explore(*args, **kwargs)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        # a submodule, as `import kvlab` made `kvlab.caches`, `kvlab.models`... available when it was eager
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module 'kvlab' has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted([*_EXPORTS, "explore"])


if "IPython" in sys.modules:  # a notebook or IPython: kvlab.html registers how traces and results display there
    importlib.import_module("kvlab.html")
