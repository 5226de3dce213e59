"""transformers' own `Cache`, instrumented: the container a strategy runs in (`Cache(layer_class_to_replicate=MyLayer)`,
or `Cache(layers=[...])`), adopted by `kvlab.watch` or built by `kvlab.make_cache(MyLayer, config)`.

A watched cache only reads, so the user's own errors reach the user unchanged. A cache kvlab builds for a strategy
(`CheckedStrategyCache`) checks each update against what attention needs and names the class in one
`StrategyError` line when the layer raises, returns tensors of the wrong shape, dtype or length, or keeps its keys
where kvlab cannot read them.
"""

from __future__ import annotations

import torch

from kvlab import _compat
from kvlab.caches.base import InstrumentedCacheMixin
from kvlab.caches.offloaded import OffloadingMixin
from kvlab.i18n import _
from kvlab.strategies.load import StrategyError


class InstrumentedCache(InstrumentedCacheMixin, _compat.Cache):
    """`transformers.Cache` that records every layer update into `self.trace`; takes Cache's arguments (`layers=` or
    `layer_class_to_replicate=`), plus the model's `config=` (its layer kinds and heads) and `trace=`/`recorder=`."""

    def __init__(self, *args, config=None, trace=None, recorder=None, role: str = "self", **kwargs):
        super().__init__(*args, **kwargs)
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)


class InstrumentedOffloadingCache(OffloadingMixin, InstrumentedCache):
    """A `Cache(..., offloading=True)` met by the watch: its layers offloaded and prefetched, each move recorded."""


def strategy_layer_name(cache) -> str:
    """The name of the layer class a generic cache is made of ("KeepEnds"); "Cache" for a mix of classes."""
    factory = getattr(cache, "layer_class_to_replicate", None)
    factory = getattr(factory, "func", factory)  # a functools.partial of the class, with its options
    if isinstance(factory, type):
        return factory.__name__
    names = sorted({type(layer).__name__ for layer in cache.layers})
    return names[0] if len(names) == 1 else "Cache"


class CheckedStrategyCache(InstrumentedCache):
    """What `make_cache` builds for a strategy: each update checked, a mistake named (`StrategyError`)."""

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        # key_states, value_states: (batch, kv_heads, new_tokens, head_dim)
        layer = self._kvlab_layer(layer_idx)
        name, queries = type(layer).__name__, int(key_states.shape[-2])
        expected = _call(name, "get_mask_sizes", lambda: int(layer.get_mask_sizes(queries)[0]))
        out = _call(
            name,
            "update",
            lambda: super(CheckedStrategyCache, self).update(key_states, value_states, layer_idx, *args, **kwargs),
        )
        check_update(name, key_states, value_states, out, expected)
        return out

    def _kvlab_record(self, layer_idx: int, op: str, tokens_added: int, started: float, work=None) -> None:
        if op == "kv":  # before the layer is read: a layer kvlab cannot read is named, not logged as unread
            layer = self.layers[layer_idx]
            check_keys_readable(type(layer).__name__, layer)
        super()._kvlab_record(layer_idx, op, tokens_added, started, work)

    def _kvlab_layer(self, layer_idx: int):
        """Layer `layer_idx`, appended first as `Cache.update` would (so its mask sizes can be asked before)."""
        while self.layer_class_to_replicate is not None and len(self.layers) <= layer_idx:
            self.layers.append(self.layer_class_to_replicate())
        return self.layers[layer_idx]


def _call(name: str, method: str, call):
    try:
        return call()
    except StrategyError:
        raise
    except Exception as err:
        raise StrategyError(
            _("{name}.{method} raised {error}").format(name=name, method=method, error=f"{type(err).__name__}: {err}")
        ) from err


def check_update(name: str, key_states, value_states, out, expected_slots: int) -> None:
    """What a layer's `update` returned is what attention needs: keys and values of the new states' batch, heads,
    head size, dtype and device, as many slots as its `get_mask_sizes` told the mask."""
    pair = out if isinstance(out, (tuple, list)) and len(out) == 2 else None
    if pair is None or not all(_is_4d(t) for t in pair):
        raise StrategyError(
            _(
                "{name}.update returned {got}; it must return (keys, values), tensors of "
                "(batch, kv_heads, seq, head_dim)"
            ).format(name=name, got=_describe(out))
        )
    for what, returned, given in (("keys", pair[0], key_states), ("values", pair[1], value_states)):
        _check_like(name, what, returned, given)
    slots = (int(pair[0].shape[-2]), int(pair[1].shape[-2]))
    if slots != (expected_slots, expected_slots):
        raise StrategyError(
            _(
                "{name}.update returned {keys} key and {values} value slots, but its get_mask_sizes told the "
                "attention mask {expected}; they must be equal"
            ).format(name=name, keys=slots[0], values=slots[1], expected=expected_slots)
        )


def _check_like(name: str, what: str, returned, given) -> None:
    """`returned` keeps the batch, heads, head size, dtype and device of the `given` new states."""
    same_shape = returned.shape[:2] == given.shape[:2] and returned.shape[-1] == given.shape[-1]
    if not same_shape or returned.dtype != given.dtype or returned.device != given.device:
        raise StrategyError(
            _(
                "{name}.update returned {what} of {got} for new states of {given}; batch, kv_heads, head_dim, dtype "
                "and device must stay"
            ).format(name=name, what=what, got=_describe(returned), given=_describe(given))
        )


def check_keys_readable(name: str, layer) -> None:
    """A strategy keeps its keys in `self.keys`, a (batch, kv_heads, seq, head_dim) tensor, where kvlab reads slots."""
    if not _is_4d(getattr(layer, "keys", None)):
        raise StrategyError(
            _(
                "{name} keeps {got} in self.keys after update; kvlab reads a strategy's slots from self.keys, a "
                "(batch, kv_heads, seq, head_dim) tensor"
            ).format(name=name, got=_describe(getattr(layer, "keys", None)))
        )


def _is_4d(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 4


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')} on {value.device}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"
