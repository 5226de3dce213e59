"""`InstrumentedCacheMixin`: the part every instrumented cache shares.

It sits *before* a transformers `Cache` subclass in the MRO and wraps the methods the model calls
(`update`, `update_conv_state`, `update_recurrent_state`) and the ones users call (`crop`). Each wrapper calls
transformers' own method with `*args, **kwargs` untouched and only *reads* the layers afterwards, so the outputs
are the transformers class's outputs, token for token.
"""

from __future__ import annotations

import inspect

from kvlab import _compat
from kvlab.caches.recorder import Recorder, now
from kvlab.layer_state import layer_kinds
from kvlab.trace import Trace


class CacheCropError(ValueError):
    """A crop that would leave the cache inconsistent with the tokens it claims to hold."""


def bound_argument(cls, name: str, args: tuple, kwargs: dict):
    """The value `name` takes when `cls.__init__` is called with `args`/`kwargs` (None if absent)."""
    bound = inspect.signature(cls.__init__).bind_partial(None, *args, **kwargs)
    return bound.arguments.get(name)


class InstrumentedCacheMixin:
    """Records every layer update into `self.trace`. Use through the concrete classes in `kvlab.caches`."""

    kvlab_role = "self"

    def _kvlab_setup(self, config=None, trace: Trace | None = None, recorder: Recorder | None = None,
                     role: str = "self") -> None:  # fmt: skip
        if not isinstance(self, _compat.Cache):
            raise TypeError(f"{type(self).__name__}: InstrumentedCacheMixin must come before a transformers Cache class")
        self.kvlab_recorder = recorder if recorder is not None else Recorder(trace)
        self.kvlab_role = role
        self._kvlab_kinds = layer_kinds(config) if config is not None else []

    @property
    def trace(self) -> Trace:
        return self.kvlab_recorder.trace

    def _kvlab_kind(self, layer_idx: int) -> str:
        if layer_idx < len(self._kvlab_kinds):
            return self._kvlab_kinds[layer_idx]
        layer = self.layers[layer_idx]
        return "sliding" if getattr(layer, "is_sliding", False) else "full"

    def _kvlab_record(self, layer_idx: int, op: str, tokens_added: int, started: float) -> None:
        self.kvlab_recorder.record_update(self.kvlab_role, layer_idx, self.layers[layer_idx],
                                          self._kvlab_kind(layer_idx), op, tokens_added, now() - started)  # fmt: skip

    # -- wrapped model-facing methods -------------------------------------------------------------------------
    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "kv")
        started = now()
        out = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        # key_states: (batch, kv_heads, new_tokens, head_dim)
        self._kvlab_record(layer_idx, "kv", key_states.shape[-2], started)
        return out

    def update_conv_state(self, conv_states, layer_idx: int, *args, **kwargs):
        self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "conv")
        started = now()
        out = super().update_conv_state(conv_states, layer_idx, *args, **kwargs)
        self._kvlab_record(layer_idx, "conv", 0, started)
        return out

    def update_recurrent_state(self, recurrent_states, layer_idx: int, *args, **kwargs):
        self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "recurrent")
        started = now()
        out = super().update_recurrent_state(recurrent_states, layer_idx, *args, **kwargs)
        self._kvlab_record(layer_idx, "recurrent", 0, started)
        return out

    def get_conv_state(self, layer_idx: int, *args, **kwargs):
        # Linear-attention models read their state every forward but update it *in place* while decoding
        # (causal_conv1d_update), never calling `update_conv_state`: this read is the only per-step signal.
        self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "read")
        started = now()
        out = super().get_conv_state(layer_idx, *args, **kwargs)
        self._kvlab_record(layer_idx, "read", 0, started)
        return out

    # -- crop ---------------------------------------------------------------------------------------------------
    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        """Refuse a crop before any layer changes. Subclasses add the rules of their layer kinds."""
        if not isinstance(tokens_to_remove, int) or isinstance(tokens_to_remove, bool):
            raise CacheCropError(f"crop takes an int, got {tokens_to_remove!r}")
        if tokens_to_remove > 0:
            raise CacheCropError(
                f"crop({tokens_to_remove}): transformers {_compat.TRANSFORMERS_VERSION} crops by a negative count; "
                f"use crop(-n) to remove the last n tokens."
            )
        length = max([int(layer.get_seq_length()) for layer in self.layers if _has_length(layer)], default=0)
        if -tokens_to_remove > length:
            raise CacheCropError(
                f"crop({tokens_to_remove}) goes past the start: the cache holds {length} tokens, "
                f"so valid counts are crop(0) .. crop(-{length})."
            )

    def _kvlab_crop_layers(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)  # transformers' own crop

    def crop(self, tokens_to_remove: int) -> None:
        self._kvlab_check_crop(tokens_to_remove)
        before = [int(layer.get_seq_length()) if _has_length(layer) else 0 for layer in self.layers]
        self._kvlab_crop_layers(tokens_to_remove)
        after = [int(layer.get_seq_length()) if _has_length(layer) else 0 for layer in self.layers]
        recording = any(self.is_recording_past(i) for i in range(len(self.layers)))
        self.kvlab_recorder.record_crop(self.kvlab_role, tokens_to_remove, recording, before, after)
        for i, layer in enumerate(self.layers):
            self.kvlab_recorder.refresh(self.kvlab_role, i, layer, self._kvlab_kind(i))


def _has_length(layer) -> bool:
    return not _compat.is_linear_layer(layer) and not isinstance(layer, _compat.DummyLayer)
