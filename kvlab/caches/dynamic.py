"""DynamicCache, instrumented: full layers grow by concatenation, sliding/chunked layers stop at the window."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.base import CacheCropError, InstrumentedCacheMixin, bound_argument


class InstrumentedDynamicCache(InstrumentedCacheMixin, _compat.DynamicCache):
    """`transformers.DynamicCache` that records every layer update into `self.trace`.

    Takes exactly DynamicCache's arguments, plus `trace=` / `recorder=` to log into a shared trace.

    Guard: a sliding layer that has filled its window without past recording cannot be cropped. transformers
    raises from inside its layer loop, after the layers before it were already cropped; kvlab refuses first.
    """

    def __init__(self, *args, trace=None, recorder=None, role: str = "self", **kwargs):
        super().__init__(*args, **kwargs)
        config = bound_argument(_compat.DynamicCache, "config", args, kwargs)
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        for idx, layer in enumerate(self.layers):
            if not isinstance(layer, _compat.DynamicSlidingWindowLayer) or layer.record_past:
                continue
            seen = int(layer.get_seq_length())
            if seen >= layer.sliding_window:
                raise CacheCropError(
                    f"crop({tokens_to_remove}) refused: {self._kvlab_kind(idx)} layer {idx} has seen {seen} tokens and "
                    f"keeps only the last {layer.sliding_window - 1}, so the tokens a crop must bring back are gone. "
                    "The cache guide's rule: call cache.activate_past_recording() before generating; sliding and "
                    "chunked layers then keep their past until a crop restricts them to the window again."
                )
