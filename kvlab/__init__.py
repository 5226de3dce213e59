"""kvlab: see and measure what a transformer's KV cache does.

    import kvlab
    model, tokenizer = kvlab.load("smollm2")
    result = kvlab.run(model, tokenizer, "The KV cache", cache="static", max_cache_len=64, max_new_tokens=16)
    result.trace.summary()

`import kvlab` is light: the names below are imported on first use (`kvlab.lazy`), torch only when needed.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

from kvlab import lazy
from kvlab._version import __version__

if TYPE_CHECKING:  # every export, once: what type checkers see and `kvlab.lazy` imports on first use
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
    from kvlab.explorer import explore
    from kvlab.i18n import current_language, set_language
    from kvlab.models import BUNDLED, UnknownModelError, load, prepare
    from kvlab.models.tiny import TINY_MODELS, tiny_model
    from kvlab.recorded_run import RunResult, run
    from kvlab.recording.trace import Trace, TraceFormatError
    from kvlab.watched_generate import generate
    from kvlab.watcher import NoCacheSeenError, Watch, watch

__getattr__, __dir__ = lazy.exports(__name__, submodules=True)

if "IPython" in sys.modules:  # a notebook or IPython: kvlab.html registers how traces and results display there
    importlib.import_module("kvlab.html")
