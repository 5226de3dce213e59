"""DynamicCache, instrumented: full layers grow by concatenation, sliding/chunked layers stop at the window."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.base import InstrumentedCacheMixin, bound_argument
from kvlab.caches.crop_rules import check_dynamic_sliding


class InstrumentedDynamicCache(InstrumentedCacheMixin, _compat.DynamicCache):
    """`transformers.DynamicCache` that records every layer update into `self.trace`; takes DynamicCache's
    arguments, plus `trace=` / `recorder=` to log into a shared trace. Crop guard: `check_dynamic_sliding`."""

    def __init__(self, *args, trace=None, recorder=None, role: str = "self", **kwargs):
        super().__init__(*args, **kwargs)
        config = bound_argument(_compat.DynamicCache, "config", args, kwargs)
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        for idx, layer in enumerate(self.layers):
            state = _compat.dynamic_sliding_state(layer)  # (seen, window, records the past), sliding layers only
            if state is not None:
                check_dynamic_sliding(tokens_to_remove, idx, self._kvlab_layer_kind(idx), *state)
