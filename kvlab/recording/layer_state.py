"""What one cache layer holds right now, read from transformers' own layer objects.

Slots are token positions along the sequence axis: *allocated* (has storage), *live* (attendable by the next
query), *masked* (allocated, not attendable: a static cache's waste), *evicted* (seen, then dropped by a window).
Plain transformers layers are read field by field (the hot path) once a first filled layer shows those fields are
all it keeps; any other class has its attributes walked for bytes (`storage.held_bytes`), and where kvlab does not
know the meaning of its keys the slot fields are None, never a made-up zero.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.i18n import _
from kvlab.log import get_logger
from kvlab.recording.layer_kinds import KIND_BY_LAYER_TYPE, layer_kinds  # noqa: F401 - re-exported
from kvlab.recording.storage import held_tensors, kv_storage_bytes, storage_bytes

log = get_logger(__name__)


@dataclass  # not frozen: a frozen dataclass's __init__ is several times slower, and this runs per layer per step
class LayerState:
    layer_kind: str  # "full" | "sliding" | "chunked" | "linear" | "dummy"
    logical_length: int | None  # tokens this layer has seen (its position count)
    slots_allocated: int | None
    slots_live: int | None
    slots_masked: int | None
    tokens_evicted: int | None
    bytes_held: int
    device: str
    quantized_tokens: int = 0
    residual_tokens: int = 0
    packed_bytes: int = 0
    residual_bytes: int = 0

    def as_dict(self) -> dict:
        return dict(vars(self))  # flat fields: a shallow copy (dataclasses.asdict deep-copies, 5x slower)


def _seq_slots(tensor) -> int:
    # (batch, kv_heads, seq, head_dim)
    if not isinstance(tensor, torch.Tensor) or tensor.dim() < 3:
        return 0
    return int(tensor.shape[-2])


def _device(layer) -> str:
    for tensor in (getattr(layer, "keys", None), *_compat.linear_states(layer)):
        if isinstance(tensor, torch.Tensor):
            return str(tensor.device)
    return "none"


def _read_dummy(layer, layer_kind: str) -> LayerState:
    return LayerState("dummy", 0, 0, 0, 0, 0, 0, "none")


def _read_linear(layer, layer_kind: str) -> LayerState:
    return LayerState("linear", 0, 0, 0, 0, 0, storage_bytes(*_compat.linear_states(layer)), _device(layer))


def _empty(layer_kind: str) -> LayerState:
    return LayerState(layer_kind, 0, 0, 0, 0, 0, 0, "none")


def _read_quantized(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return _empty(layer_kind)
    length = int(layer.get_seq_length())
    packed = storage_bytes(*_compat.quantized_payload(layer))
    residual_tokens = _seq_slots(layer.keys)
    residual = kv_storage_bytes(layer.keys, layer.values)
    return LayerState(
        layer_kind,
        length,
        length,
        length,
        0,
        0,
        packed + residual,
        str(layer.keys.device),
        quantized_tokens=length - residual_tokens if isinstance(layer, _compat.QuantizedLayer) else length,
        residual_tokens=residual_tokens,
        packed_bytes=packed,
        residual_bytes=residual,
    )


def _kv_state(layer, layer_kind: str, seen: int, allocated: int, live: int, evicted: int) -> LayerState:
    held = kv_storage_bytes(layer.keys, layer.values)
    return LayerState(layer_kind, seen, allocated, live, allocated - live, evicted, held, str(layer.keys.device))


def _read_static_sliding(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return _empty(layer_kind)
    seen = _compat.static_sliding_length(layer)
    allocated = int(layer.max_cache_len)
    live = min(seen, allocated)
    return _kv_state(layer, layer_kind, seen, allocated, live, seen - live)


def _read_static(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return _empty(layer_kind)
    length = int(layer.get_seq_length())
    return _kv_state(layer, layer_kind, length, int(layer.max_cache_len), length, 0)


def _read_dynamic(layer, layer_kind: str) -> LayerState:
    """Dynamic layers, sliding or not: what is stored is what is attended."""
    if not layer.is_initialized:
        return _empty(layer_kind)
    length = int(layer.get_seq_length())
    allocated = _seq_slots(layer.keys)
    return _kv_state(layer, layer_kind, length, allocated, allocated, max(length - allocated, 0))


def _read_unknown(layer, layer_kind: str) -> LayerState:
    """Every byte the layer keeps, its slots unknown (None); a layer with no tensor yet holds no slots."""
    tensors = list(held_tensors(layer))
    held = storage_bytes(tensors)
    if not held:
        return _empty(layer_kind)
    return LayerState(layer_kind, None, None, None, None, None, held, str(tensors[0].device))


Reader = Callable[[object, str], LayerState]


def _with_held_bytes(reader: Reader) -> Reader:
    """`reader`'s slots, with the bytes of everything the layer keeps (indexer keys, a hybrid's linear state)."""

    def read(layer, layer_kind: str) -> LayerState:
        state = reader(layer, layer_kind)
        tensors = list(held_tensors(layer))
        state.bytes_held = storage_bytes(tensors)
        if state.device == "none" and state.bytes_held:  # a hybrid's linear state, before its first keys
            state.device = str(tensors[0].device)
        return state

    return read


# Classes whose every field kvlab reads (fast path, checked once on a filled layer), and classes that keep more
# than keys and values: read with their base class's slots and walked bytes.
_FIELD_READ = {
    "DynamicLayer": _read_dynamic,
    "DynamicSlidingWindowLayer": _read_dynamic,
    "StaticLayer": _read_static,
    "StaticSlidingWindowLayer": _read_static_sliding,
    "QuantizedLayer": _read_quantized,
    "QuantoQuantizedLayer": _read_quantized,
    "HQQQuantizedLayer": _read_quantized,
    "Fp8QuantizedLayer": _read_quantized,
    "LinearAttentionLayer": _read_linear,
    "DummyLayer": _read_dummy,
}
_SLOTS_READ = {
    "DynamicIndexedLayer": _read_dynamic,  # + indexer keys (batch, tokens, index_head_dim)
    "StaticIndexedLayer": _read_static,
    "LinearAttentionAndFullAttentionLayer": _read_dynamic,  # + conv and recurrent states
    "LinearAttentionAndSlidingWindowAttentionLayer": _read_dynamic,
    "LinearAttentionAndStaticFullAttentionLayer": _read_static,
    "LinearAttentionAndStaticSlidingWindowAttentionLayer": _read_static_sliding,
}
_READERS: dict[type, Reader] = {}  # layer class -> its reader, decided once per class


@functools.cache
def _known_classes() -> dict[type, tuple[Reader, bool]]:
    """transformers class -> (reader, whether its fields are all it keeps), for the classes this release has."""
    known: dict[type, tuple[Reader, bool]] = {}
    for table, complete in ((_SLOTS_READ, False), (_FIELD_READ, True)):
        for name, reader in table.items():
            layer_class = _compat.cache_layer_class(name)
            if layer_class is not None:
                known[layer_class] = (reader, complete)
    return known


def own_class(layer_type: type) -> type:
    """The class kvlab reads a layer as: the first class of its MRO that is not one of kvlab's stateless
    subclasses (the padded hqq layer, the counting and transfer-recording twins)."""
    return next((c for c in layer_type.__mro__ if not _is_kvlab_s(c)), layer_type)


def _is_kvlab_s(layer_class: type) -> bool:
    # a twin built with type() names the class it stands for (`kvlab_counted_class`, `kvlab_recorded_class`)
    return layer_class.__module__.startswith("kvlab.") or any(name.startswith("kvlab_") for name in vars(layer_class))


def _check_once(layer_type: type, reader: Reader) -> Reader:
    """`reader`, until a first filled layer shows whether its fields are all it keeps: then `reader` alone (the fast
    path) or, if the walk finds more, `reader` with walked bytes."""

    def read(layer, layer_kind: str) -> LayerState:
        state = reader(layer, layer_kind)
        if state.bytes_held:
            held = storage_bytes(list(held_tensors(layer)))
            if held == state.bytes_held:
                _READERS[layer_type] = reader
            else:
                _READERS[layer_type] = _with_held_bytes(reader)
                state.bytes_held = held
        return state

    return read


def _reader_for(layer_type: type) -> Reader:
    """The reader of a layer class, decided once per class (isinstance on transformers' ABCs is slow)."""
    base = own_class(layer_type)
    reader, complete = _known_classes().get(base, (None, False))
    chosen: Reader
    if reader is None:
        _warn_unread(base)
        chosen = _read_unknown
    elif complete:
        chosen = _check_once(layer_type, reader)
    else:
        chosen = _with_held_bytes(reader)
    _READERS[layer_type] = chosen
    return chosen


@functools.cache
def _warn_unread(layer_class: type) -> None:
    log.warning(
        "%s",
        _("kvlab has no slot reading for {layer_class}: its bytes are counted, its slots are not.").format(
            layer_class=layer_class.__name__
        ),
    )


def reads_every_change(layer) -> bool:
    """Whether every change to what `layer` keeps goes through a cache method kvlab records: true for plain layers;
    one that keeps more (indexer keys, buffers the attention writes directly) is re-read after each forward."""
    layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470)
    return _plain(layer_type)


@functools.cache
def _plain(layer_type: type) -> bool:
    return _known_classes().get(own_class(layer_type), (None, False))[1]


def read_layer(layer, layer_kind: str) -> LayerState:
    """Snapshot `layer`; `layer_kind` comes from the config."""
    layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470)
    reader = _READERS.get(layer_type)
    if reader is None:
        reader = _reader_for(layer_type)
    return reader(layer, layer_kind)
