"""DynamicCache, instrumented: full layers grow by concatenation, sliding/chunked layers stop at the window."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.base import InstrumentedCacheMixin, bound_argument


class InstrumentedDynamicCache(InstrumentedCacheMixin, _compat.DynamicCache):
    """`transformers.DynamicCache` that records every layer update into `self.trace`.

    Takes exactly DynamicCache's arguments, plus `trace=` / `recorder=` to log into a shared trace.
    """

    def __init__(self, *args, trace=None, recorder=None, role: str = "self", **kwargs):
        super().__init__(*args, **kwargs)
        config = bound_argument(_compat.DynamicCache, "config", args, kwargs)
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)
