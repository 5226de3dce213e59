"""Counting the bytes a cache really holds: every distinct storage reachable from an object, once.

`numel * element_size` is wrong twice for KV caches: a sliding layer's keys are a *view* into a larger
concatenation, and quantized tensors are wrapper subclasses whose payload, scales and zero points sit in inner
tensors (quanto's `element_size()` misreports them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

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


# -- what a Cache object holds beside its `layers` --------------------------------------------------------------
# Attribute values that never hold cached data: walked past without a look inside.
_NO_STATE = (type, torch.nn.Module, torch.device, torch.dtype, str, bytes, int, float, bool, type(None))


def outside_names(cache, is_own: Callable[[object], bool]) -> tuple[str, ...]:
    """The attributes of a Cache object beside `layers` that hold tensors or may come to (a tensor, a container, an
    object of its own), kvlab's attributes and `is_own`'s (another Cache, read on its own) left out. Read once per
    cache: MiniMax's `linear_cache` is an empty list until its first forward."""
    return tuple(
        name
        for name, value in vars(cache).items()
        if name != "layers"
        and not name.startswith(("_kvlab", "kvlab_"))
        and not isinstance(value, _NO_STATE)
        and not is_own(value)
    )


def reachable_tensors(value, visited: set[int], is_own: Callable[[object], bool]) -> Iterator[torch.Tensor]:
    """Every tensor `value` reaches through containers and object attributes (kvlab's aside), each container or
    object once (`visited`: their ids), wrapper subclasses unflattened."""
    if isinstance(value, torch.Tensor):
        yield from _inner_tensors(value)
    elif isinstance(value, _NO_STATE) or id(value) in visited or is_own(value):
        return
    elif isinstance(value, (list, tuple, set, frozenset, dict)):
        visited.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            yield from reachable_tensors(item, visited, is_own)
    elif hasattr(value, "__dict__"):
        visited.add(id(value))
        for name, item in vars(value).items():
            if not name.startswith(("_kvlab", "kvlab_")):
                yield from reachable_tensors(item, visited, is_own)


def outside_tensors(
    cache, names: tuple[str, ...], layer_count: int, is_own: Callable[[object], bool]
) -> list[tuple[int | str, list[torch.Tensor]]]:
    """(key, tensors) of what the attributes `names` hold, counters aside: the key is the layer index where an
    attribute is a list indexed like the layers (at most `layer_count` long: MiniMax's `linear_cache[i]` is layer
    i's), else the attribute's name."""
    found: list[tuple[int | str, list[torch.Tensor]]] = []
    visited: set[int] = set()
    for name in names:
        value = getattr(cache, name, None)
        items: Iterable[tuple[int | str, object]] = ((name, value),)
        if isinstance(value, list) and 0 < len(value) <= layer_count:
            items = enumerate(value)
        for key, item in items:
            tensors = [t for t in reachable_tensors(item, visited, is_own) if not is_counter(t)]
            if tensors:
                found.append((key, tensors))
    return found


@dataclass
class Outside:
    """The bytes a Cache object holds beside its `layers`, storages its layers share left out: per layer index
    (`outside_tensors`' pairing), else per attribute name."""

    by_layer: dict[int, int] = field(default_factory=dict)
    by_name: dict[str, int] = field(default_factory=dict)


def outside_bytes(
    cache, names: tuple[str, ...], layer_count: int, layers: Iterable, is_own: Callable[[object], bool]
) -> Outside:
    """`Outside` of the attributes `names` (`outside_names`'); `layers` are walked only when a tensor is found."""
    found = outside_tensors(cache, names, layer_count, is_own)
    outside = Outside()
    if not found:
        return outside
    seen: set = set()
    _distinct_bytes((t for layer in layers for t in held_tensors(layer)), seen)  # the layers' storages: theirs
    for key, tensors in found:
        nbytes = _distinct_bytes(tensors, seen)
        if not nbytes:  # views of storages counted already
            continue
        if isinstance(key, int):
            outside.by_layer[key] = outside.by_layer.get(key, 0) + nbytes
        else:
            outside.by_name[key] = outside.by_name.get(key, 0) + nbytes
    return outside
