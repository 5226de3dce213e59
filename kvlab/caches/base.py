"""`InstrumentedCacheMixin`: the part every instrumented cache shares.

It sits before a transformers `Cache` subclass in the MRO and wraps the methods the model and users call. Each
wrapper calls transformers' own method with `*args, **kwargs` untouched and only *reads* the layers afterwards, so
the outputs are the transformers class's outputs, token for token.
"""

from __future__ import annotations

import copy
import inspect
from typing import TYPE_CHECKING, TypeGuard

from kvlab import _compat
from kvlab.caches.crop_rules import (
    CacheCropError,
    check_crop,
    check_linear_rollback,
    check_states_to_keep,
    crop_count,
)
from kvlab.model_facts import model_facts
from kvlab.recording.layer_kinds import layer_kind_at
from kvlab.recording.layer_state import count_tokens, forget_tokens, read_after_update, read_layer
from kvlab.recording.recorder import Recorder, now
from kvlab.recording.trace import Trace
from kvlab.recording.work import QUANT_FIELDS, attention_counts, layer_heads

NO_PACKING = (0,) * len(QUANT_FIELDS)

if TYPE_CHECKING:
    # The mixin always comes before a transformers Cache class; at run time it is a plain class (no transformers
    # import here; `_kvlab_setup` refuses a class with no Cache after it).
    from kvlab._compat import Cache as _CacheBase
    from kvlab._compat import CacheLayerMixin
else:
    _CacheBase = object

__all__ = ["CacheCropError", "InstrumentedCacheMixin", "bound_argument", "deepcopy_cache"]


def bound_argument(cls, name: str, args: tuple, kwargs: dict):
    """The value `name` takes when `cls.__init__` is called with `args`/`kwargs` (None if absent)."""
    bound = inspect.signature(cls.__init__).bind_partial(None, *args, **kwargs)
    return bound.arguments.get(name)


def _then_refresh(name: str, op: str):
    """A method that calls transformers' `name` with its arguments untouched, then logs what changed as `op`."""

    def method(self, *args, **kwargs):
        self.kvlab_recorder.flush()  # the updates it deferred read before the layers change
        out = getattr(super(InstrumentedCacheMixin, self), name)(*args, **kwargs)
        self._kvlab_refresh(op)
        return out

    method.__name__ = method.__qualname__ = name
    return method


class InstrumentedCacheMixin(_CacheBase):
    """Records every layer update into `self.trace`. Use through the concrete classes in `kvlab.caches`."""

    kvlab_role = "self"
    kvlab_recorder: Recorder
    _kvlab_layer_kinds: list[str]
    _kvlab_query_heads: int | tuple[int, ...] = 0  # `ModelFacts.query_heads`; 0: the KV heads stand in

    def _kvlab_setup(
        self, config=None, trace: Trace | None = None, recorder: Recorder | None = None, role: str = "self"
    ) -> None:
        if not isinstance(self, _compat.Cache):
            raise TypeError(
                f"{type(self).__name__}: InstrumentedCacheMixin must come before a transformers Cache class"
            )
        self.kvlab_recorder = recorder if recorder is not None else Recorder(trace)
        self.kvlab_role = role
        facts = model_facts(config) if config is not None else None
        self._kvlab_layer_kinds = list(facts.layer_kinds) if facts else []
        self._kvlab_query_heads = facts.query_heads if facts else 0

    @property
    def trace(self) -> Trace:
        return self.kvlab_recorder.trace

    def _kvlab_layer_kind(self, layer_idx: int) -> str:
        return layer_kind_at(self._kvlab_layer_kinds, layer_idx, self.layers[layer_idx])

    def _kvlab_record(self, layer_idx: int, op: str, tokens_added: int, started: float, work=None) -> None:
        """Log layer `layer_idx` after `op`, with the update's `work` (`attention_counts`' tuple; none by default)."""
        seconds = now() - started
        if work is None:
            work = (0, int(tokens_added), 0, 0, *self._kvlab_layer_work(layer_idx))
        layer, layer_kind = self.layers[layer_idx], self._kvlab_layer_kind(layer_idx)
        if tokens_added:
            count_tokens(layer, tokens_added)  # a strategy's tokens seen (the built-in layers count their own)
        self.kvlab_recorder.record_update(
            self.kvlab_role, layer_idx, layer, layer_kind, op, tokens_added, seconds, work
        )

    def _kvlab_layer_work(self, layer_idx: int) -> tuple:
        """The packing counters (`QUANT_FIELDS`) a QuantizedCache adds to an update; none here."""
        return NO_PACKING

    # -- wrapped model-facing methods -------------------------------------------------------------------------
    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        recorder = self.kvlab_recorder
        started = recorder.begin(self.kvlab_role, layer_idx, "kv")
        out = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        seconds = now() - started
        if read_after_update(type(self.layers[layer_idx])):
            # the hot path, a plain dynamic layer: read with the step's others at its end (`Recorder.defer`)
            recorder.defer(self, layer_idx, seconds)
            return out
        # key_states: (batch, kv_heads, new_tokens, head_dim); out: what attention scores the queries against
        work = attention_counts(
            key_states, out, layer_heads(self._kvlab_query_heads, layer_idx), self._kvlab_layer_work(layer_idx)
        )
        self._kvlab_record(layer_idx, "kv", key_states.shape[-2], started, work)
        return out

    def update_conv_state(self, conv_states, layer_idx: int, *args, **kwargs):
        started = self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "conv")
        out = super().update_conv_state(conv_states, layer_idx, *args, **kwargs)
        self._kvlab_record(layer_idx, "conv", 0, started)
        return out

    def update_recurrent_state(self, recurrent_states, layer_idx: int, *args, **kwargs):
        started = self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "recurrent")
        out = super().update_recurrent_state(recurrent_states, layer_idx, *args, **kwargs)
        self._kvlab_record(layer_idx, "recurrent", 0, started)
        return out

    def get_conv_state(self, layer_idx: int, *args, **kwargs):
        # Linear-attention models update their state in place while decoding: this read is the only per-step signal
        started = self.kvlab_recorder.begin(self.kvlab_role, layer_idx, "read")
        out = super().get_conv_state(layer_idx, *args, **kwargs)
        self._kvlab_record(layer_idx, "read", 0, started)
        return out

    # -- methods that change what the layers hold without an update ---------------------------------------------
    def _kvlab_refresh(self, op: str) -> None:
        """Re-read every layer after `op` and log the layers whose state changed, so bytes stay exact."""
        recorder = self.kvlab_recorder
        for i, layer in enumerate(self.layers):
            layer_kind = self._kvlab_layer_kind(i)
            if read_layer(layer, layer_kind) != recorder.state(self.kvlab_role, i):
                recorder.record_update(self.kvlab_role, i, layer, layer_kind, op, 0, 0.0)

    def reset(self, *args, **kwargs):
        self.kvlab_recorder.flush()
        out = super().reset(*args, **kwargs)
        for layer in self.layers:
            forget_tokens(layer)  # a strategy layer starts counting again
        self._kvlab_refresh("reset")
        return out

    # transformers' method, then a re-read of every layer (e.g. reorder_cache picks beams)
    reorder_cache = _then_refresh("reorder_cache", "reorder")
    batch_repeat_interleave = _then_refresh("batch_repeat_interleave", "repeat")
    batch_select_indices = _then_refresh("batch_select_indices", "select")

    def activate_past_recording(self, *args, **kwargs):
        linear = [layer for layer in self.layers if _compat.is_linear_state_layer(layer)]
        if linear:  # refused before any layer starts recording
            rolls_back = all(_compat.keeps_recurrent_states(layer) for layer in linear)
            check_states_to_keep(kwargs.get("recurrent_states_to_keep"), rolls_back)
        out = super().activate_past_recording(*args, **kwargs)
        self.trace.meta.setdefault("past_recording_from_step", self.kvlab_recorder.step)
        return out

    def __deepcopy__(self, memo):
        return deepcopy_cache(self, memo)

    # -- crop ---------------------------------------------------------------------------------------------------
    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        """Refuse a crop before any layer changes; subclasses add the rules of their layer kinds."""
        lengths = [int(layer.get_seq_length()) for layer in self.layers if _has_length(layer)]
        # only linear-attention states: no token count to check against (None); their own rule follows
        check_crop(tokens_to_remove, max(lengths) if lengths else None)
        for idx, layer in enumerate(self.layers):
            if _compat.is_linear_state_layer(layer):
                recording = _compat.recording_linear(layer)
                restorable = _compat.restorable_tokens(layer) if recording else 0
                check_linear_rollback(tokens_to_remove, idx, recording, restorable)

    def _kvlab_restoring(self, tokens_to_remove: int) -> int:
        """The recurrent states a crop puts back: one per initialized state of each recording linear-attention
        layer, when it removes tokens."""
        if tokens_to_remove == 0:
            return 0
        layers = (layer for layer in self.layers if _compat.is_linear_state_layer(layer))
        return sum(_compat.restored_states(layer) for layer in layers)

    def _kvlab_crop_layers(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)  # transformers' own crop

    def crop(self, tokens_to_remove) -> None:
        tokens_to_remove = crop_count(tokens_to_remove)
        self._kvlab_check_crop(tokens_to_remove)
        self.kvlab_recorder.flush()
        before = [_crop_length(layer) for layer in self.layers]
        restored = self._kvlab_restoring(tokens_to_remove)
        self._kvlab_crop_layers(tokens_to_remove)
        for layer in self.layers:  # crop(-n) removes n: a strategy layer's tokens seen lose them
            count_tokens(layer, min(tokens_to_remove, 0))
        after = [_crop_length(layer) for layer in self.layers]
        recording = any(self.is_recording_past(i) for i in range(len(self.layers)))
        self.kvlab_recorder.record_crop(
            self.kvlab_role, tokens_to_remove, recording, before, after, recurrent_states_restored=restored
        )
        self._kvlab_refresh("crop")


class BuiltFromConfig(InstrumentedCacheMixin):
    """The twin of a transformers class built with `config=`: it takes that class's arguments untouched, plus
    `trace=` / `recorder=` / `role=` to log into a shared trace; the config's facts name each layer's kind."""

    _kvlab_transformers_class: type  # the transformers class the twin subclasses, whose signature binds `config`

    def __init__(self, *args, trace=None, recorder=None, role: str = "self", **kwargs):
        super().__init__(*args, **kwargs)
        config = bound_argument(self._kvlab_transformers_class, "config", args, kwargs)
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)


def deepcopy_cache(cache: _CacheBase, memo: dict):
    """A deep copy with its own trace (the history so far, then its own), for the prefix-cache recipe.

    An offloaded cache's prefetch `torch.Stream` cannot be pickled: the copy gets a fresh one on the same device.
    A watching `kvlab.watch` is shared, not copied, and told."""
    pair = cache.__dict__.get("self_attention_cache")  # an encoder-decoder pair shares one recorder
    recorder = (pair if pair is not None else cache).__dict__["kvlab_recorder"]
    recorder.flush()  # the copy starts from every update logged
    copied = type(cache).__new__(type(cache))
    memo[id(cache)] = copied
    for name, value in cache.__dict__.items():
        if name == "_kvlab_watch":
            copied.__dict__[name] = value
        elif _compat.is_stream(value):
            copied.__dict__[name] = _compat.new_stream_like(value)
        else:
            copied.__dict__[name] = copy.deepcopy(value, memo)
    watch = cache.__dict__.get("_kvlab_watch")
    if watch is not None:
        watch._copied(cache, copied)
    return copied


def _crop_length(layer) -> int:
    """A layer's tokens as a crop event reports them: a linear-attention layer's own count where it keeps one (5.25),
    else 0."""
    if _has_length(layer):
        return int(layer.get_seq_length())
    return _compat.linear_tokens_seen(layer) or 0


def _has_length(layer) -> TypeGuard[CacheLayerMixin]:
    """A layer that counts tokens (`get_seq_length`): neither a linear-attention state nor a DummyLayer."""
    return not _compat.is_linear_layer(layer) and not isinstance(layer, _compat.DummyLayer)
