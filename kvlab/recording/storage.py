"""Counting the bytes a cache really holds: every distinct storage reachable from an object, once.

`numel * element_size` is wrong twice for KV caches: a sliding layer's keys are a *view* into a larger
concatenation, and quantized tensors are wrapper subclasses whose payload, scales and zero points sit in inner
tensors (quanto's `element_size()` misreports them).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def _inner_tensors(obj) -> Iterable[torch.Tensor]:
    """Plain tensors reachable from `obj`: tensors, tensor subclasses (unflattened), tuples, lists, dicts."""
    if obj is None:
        return
    if isinstance(obj, torch.Tensor):
        flatten = getattr(obj, "__tensor_flatten__", None)
        if flatten is not None and type(obj) is not torch.Tensor and not isinstance(obj, torch.nn.Parameter):
            names, _ = flatten()  # wrapper subclass, e.g. quanto's packed QTensor: (_data, _scale, _shift)
            for name in names:
                yield from _inner_tensors(getattr(obj, name))
        else:
            yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _inner_tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _inner_tensors(value)
    else:
        # backend objects that keep their tensors as attributes (e.g. hqq's packed data classes)
        for value in getattr(obj, "__dict__", {}).values():
            if isinstance(value, (torch.Tensor, dict, list, tuple)):
                yield from _inner_tensors(value)


def _storage_key(tensor: torch.Tensor) -> tuple:
    storage = tensor.untyped_storage()
    return (tensor.device.type, tensor.device.index, storage.data_ptr())


def kv_storage_bytes(keys: torch.Tensor, values: torch.Tensor) -> int:
    """`storage_bytes(keys, values)` for two plain tensors: the per-layer, per-step hot path of a trace."""
    if type(keys) is not torch.Tensor or type(values) is not torch.Tensor:
        return storage_bytes(keys, values)
    k, v = keys.untyped_storage(), values.untyped_storage()
    return k.nbytes() + (v.nbytes() if v.data_ptr() != k.data_ptr() or k.nbytes() == 0 else 0)


def _distinct_bytes(tensors: Iterable[torch.Tensor], seen: set) -> int:
    total = 0
    for tensor in tensors:
        if tensor.numel() == 0 and tensor.untyped_storage().nbytes() == 0:
            continue
        key = _storage_key(tensor)
        if key in seen:
            continue
        seen.add(key)
        total += tensor.untyped_storage().nbytes()
    return total


def storage_bytes(*objs, seen: set | None = None) -> int:
    """Bytes of the distinct storages behind `objs`, each counted once (across calls sharing `seen`)."""
    seen = set() if seen is None else seen
    return sum(_distinct_bytes(_inner_tensors(obj), seen) for obj in objs)


def is_counter(tensor: torch.Tensor) -> bool:
    """An integer scalar a layer keeps as a tensor to stay compile-friendly: bookkeeping, not cached data."""
    return tensor.dim() == 0 and not tensor.is_floating_point() and not tensor.is_complex()


def held_tensors(obj) -> Iterable[torch.Tensor]:
    """The tensors of cached data reachable from `obj`'s attributes, counters and kvlab's own attributes left out."""
    for name, value in vars(obj).items():
        if name.startswith(("_kvlab", "kvlab_")):  # what kvlab hung on the object (a recorder), not its data
            continue
        if isinstance(value, (type, torch.nn.Module)):  # a backend class (hqq's quantizer), a module's weights
            continue
        for tensor in _inner_tensors(value):
            if not is_counter(tensor):
                yield tensor


def held_bytes(obj) -> int:
    """Bytes of the distinct storages `obj` keeps alive through its attributes, whatever they are named."""
    return _distinct_bytes(held_tensors(obj), set())


def view_bytes(*objs) -> int:
    """Bytes of the logical elements only (what `numel * element_size` reports), for comparison."""
    return sum(t.numel() * t.element_size() for obj in objs for t in _inner_tensors(obj))
