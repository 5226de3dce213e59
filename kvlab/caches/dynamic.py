"""DynamicCache, instrumented: full layers grow by concatenation, sliding/chunked layers stop at the window."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.base import BuiltFromConfig
from kvlab.caches.crop_rules import check_dynamic_sliding


class InstrumentedDynamicCache(BuiltFromConfig, _compat.DynamicCache):
    """`transformers.DynamicCache` that records every layer update into `self.trace`; takes DynamicCache's
    arguments, plus `trace=` / `recorder=` to log into a shared trace. Crop guard: `check_dynamic_sliding`."""

    _kvlab_transformers_class = _compat.DynamicCache

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        for idx, layer in enumerate(self.layers):
            state = _compat.dynamic_sliding_state(layer)  # (seen, window, records the past), sliding layers only
            if state is not None:
                check_dynamic_sliding(tokens_to_remove, idx, self._kvlab_layer_kind(idx), *state)
