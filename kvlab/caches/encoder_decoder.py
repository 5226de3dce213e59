"""EncoderDecoderCache, instrumented: a self-attention cache that grows per generated token and a
cross-attention cache filled once with the encoder's keys and values (fixed at the source length)."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.base import InstrumentedCacheMixin, deepcopy_cache
from kvlab.i18n import _
from kvlab.recording.recorder import Recorder
from kvlab.recording.trace import Trace


class InstrumentedEncoderDecoderCache(_compat.EncoderDecoderCache):
    """Holds two instrumented caches that log into one trace, with `role` "self" and "cross"."""

    def __init__(self, self_attention_cache, cross_attention_cache):
        for cache in (self_attention_cache, cross_attention_cache):
            if not isinstance(cache, InstrumentedCacheMixin):
                raise TypeError(
                    _("InstrumentedEncoderDecoderCache needs instrumented caches, got {got}").format(
                        got=type(cache).__name__
                    )
                )
        super().__init__(self_attention_cache, cross_attention_cache)

    @classmethod
    def from_config(cls, config, self_attention_class, trace: Trace | None = None, **self_kwargs):
        from kvlab.caches.kinds import InstrumentedDynamicCache

        recorder = Recorder(trace)
        decoder_config = config.get_text_config(decoder=True)
        return cls(
            self_attention_class(config=decoder_config, recorder=recorder, role="self", **self_kwargs),
            InstrumentedDynamicCache(config=decoder_config, recorder=recorder, role="cross"),
        )

    @property
    def trace(self) -> Trace:
        return self.self_attention_cache.trace

    def __deepcopy__(self, memo):
        return deepcopy_cache(self, memo)
