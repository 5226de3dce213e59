"""StaticCache, instrumented: every layer is allocated at `max_cache_len` up front and masks what is empty."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.base import CacheCropError, InstrumentedCacheMixin, bound_argument


class InstrumentedStaticCache(InstrumentedCacheMixin, _compat.StaticCache):
    """`transformers.StaticCache` that records every layer update into `self.trace`.

    Guard: once a static sliding layer has wrapped (seen more tokens than its window), the evicted tokens are
    gone and StaticCache cannot record the past, yet transformers' `crop` still runs and the next logits are
    wrong (up to 10.6 apart from a fresh prefill on Gemma 3 at 700 tokens). kvlab refuses that crop.
    """

    def __init__(self, *args, trace=None, recorder=None, role: str = "self", **kwargs):
        super().__init__(*args, **kwargs)
        config = bound_argument(_compat.StaticCache, "config", args, kwargs)
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        if tokens_to_remove == 0:
            return
        for idx, layer in enumerate(self.layers):
            if isinstance(layer, _compat.StaticSlidingWindowLayer) and layer.is_initialized:
                seen = _compat.static_sliding_length(layer)
                if seen > layer.max_cache_len:
                    raise CacheCropError(
                        f"crop({tokens_to_remove}) refused: sliding layer {idx} has seen {seen} tokens but keeps only "
                        f"its window of {layer.max_cache_len}, so the tokens a crop must restore are already evicted. "
                        "A StaticCache cannot record the past; use a DynamicCache with "
                        "cache.activate_past_recording() before generating to be able to roll back."
                    )
