"""StaticCache, instrumented: every layer is allocated at `max_cache_len` up front and masks what is empty."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.base import BuiltFromConfig
from kvlab.caches.crop_rules import check_static_sliding


class InstrumentedStaticCache(BuiltFromConfig, _compat.StaticCache):
    """`transformers.StaticCache` that records every layer update into `self.trace`. Crop guard:
    `check_static_sliding` (a wrapped sliding layer's evicted tokens are gone)."""

    _kvlab_transformers_class = _compat.StaticCache

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        for idx, layer in enumerate(self.layers):
            state = _compat.static_sliding_state(layer)  # (seen, window), sliding layers that hold tokens only
            if state is not None:
                check_static_sliding(tokens_to_remove, idx, *state)

    def _kvlab_crop_layers(self, tokens_to_remove: int) -> None:
        for layer in self.layers:  # what transformers' Cache.crop does, through _compat (static layers crop from 5.24)
            _compat.crop_static_layer(layer, tokens_to_remove)
