"""What one cache layer holds right now, read from transformers' own layer objects.

Slots are token positions along the sequence axis: *allocated* (has storage), *live* (attendable by the next
query), *masked* (allocated, not attendable: a static cache's waste), *evicted* (seen, then dropped by a window).
Plain transformers layers are read field by field (the hot path) once a first filled layer shows those fields are
all it keeps; any other class has its attributes walked for bytes (`storage.held_bytes`). A class of the user's that
subclasses a dynamic or static layer (a strategy) is read from what it holds (`_read_strategy`): its keys' slots,
its own mask sizes, and the tokens kvlab's caches counted into its updates (`count_tokens`). Where kvlab does not
know the meaning of a layer's keys the slot fields are None, never a made-up zero.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from kvlab import _compat
from kvlab.i18n import _
from kvlab.log import get_logger
from kvlab.recording.layer_kinds import KIND_BY_LAYER_TYPE, layer_kinds  # noqa: F401 - re-exported
from kvlab.recording.storage import held_tensors, kv_storage_bytes, storage_bytes

log = get_logger(__name__)


# Not frozen: a frozen dataclass's __init__ is several times slower, and this runs per layer per step; slots: no
# dict per state (one is kept per update event)
@dataclass(slots=True)
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
        return dict(zip(STATE_FIELDS, self.as_tuple()))  # flat fields (dataclasses.asdict deep-copies, 5x slower)

    def as_tuple(self) -> tuple:
        """The fields' values, in `STATE_FIELDS` order."""
        return (
            self.layer_kind,
            self.logical_length,
            self.slots_allocated,
            self.slots_live,
            self.slots_masked,
            self.tokens_evicted,
            self.bytes_held,
            self.device,
            self.quantized_tokens,
            self.residual_tokens,
            self.packed_bytes,
            self.residual_bytes,
        )


STATE_FIELDS = tuple(f.name for f in fields(LayerState))


def _seq_slots(tensor) -> int:
    # (batch, kv_heads, seq, head_dim)
    if not isinstance(tensor, torch.Tensor) or tensor.dim() < 3:
        return 0
    return int(tensor.shape[-2])


@functools.cache
def device_name(device: torch.device) -> str:
    """ "cpu", "cuda:0": read once per device (`str` builds a new string each time, on every update)."""
    return str(device)


def _device(layer) -> str:
    for tensor in (getattr(layer, "keys", None), *_compat.linear_states(layer)):
        if isinstance(tensor, torch.Tensor):
            return device_name(tensor.device)
    return "none"


def _read_dummy(layer, layer_kind: str) -> LayerState:
    return LayerState("dummy", 0, 0, 0, 0, 0, 0, "none")


def _read_linear(layer, layer_kind: str) -> LayerState:
    return LayerState("linear", 0, 0, 0, 0, 0, storage_bytes(*_compat.linear_states(layer)), _device(layer))


def empty_state(layer_kind: str) -> LayerState:
    """A layer that holds nothing yet (or again, after a reset)."""
    return LayerState(layer_kind, 0, 0, 0, 0, 0, 0, "none")


def _read_quantized(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return empty_state(layer_kind)
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
        device_name(layer.keys.device),
        quantized_tokens=length - residual_tokens if isinstance(layer, _compat.QuantizedLayer) else length,
        residual_tokens=residual_tokens,
        packed_bytes=packed,
        residual_bytes=residual,
    )


def _kv_state(layer, layer_kind: str, seen: int, allocated: int, live: int, evicted: int) -> LayerState:
    held, device = kv_storage_bytes(layer.keys, layer.values), device_name(layer.keys.device)
    return LayerState(layer_kind, seen, allocated, live, allocated - live, evicted, held, device)


def _read_static_sliding(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return empty_state(layer_kind)
    seen = _compat.static_sliding_length(layer)
    allocated = int(layer.max_cache_len)
    live = min(seen, allocated)
    return _kv_state(layer, layer_kind, seen, allocated, live, seen - live)


def _read_static(layer, layer_kind: str) -> LayerState:
    if not layer.is_initialized:
        return empty_state(layer_kind)
    length = int(layer.get_seq_length())
    return _kv_state(layer, layer_kind, length, int(layer.max_cache_len), length, 0)


def _read_dynamic(layer, layer_kind: str) -> LayerState:
    """Dynamic layers, sliding or not: what is stored is what is attended."""
    if not layer.is_initialized:
        return empty_state(layer_kind)
    length = int(layer.get_seq_length())
    allocated = _seq_slots(layer.keys)
    return _kv_state(layer, layer_kind, length, allocated, allocated, max(length - allocated, 0))


# On a strategy layer: the tokens handed to its `update` since kvlab met it (kvlab's caches count them, as no
# transformers field does for a class that evicts on its own); `held_tensors` leaves kvlab's attributes out.
TOKENS_SEEN = "_kvlab_tokens_seen"


def _read_strategy(layer, layer_kind: str) -> LayerState:
    """A user's subclass of a dynamic layer: slots stored are its keys' (batch, kv_heads, seq, head_dim) seq axis;
    live, what its own `get_mask_sizes` lets the next query attend, the rest masked; evicted, the tokens seen minus
    those it still holds. User code that raises here leaves the reading to the tensors alone."""
    state = _strategy_state(layer, layer_kind)
    layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470)
    if state.slots_allocated and _own_mask(layer_type):
        try:
            live = int(layer.get_mask_sizes(1)[0]) - 1  # (keys the next single query attends, their first position)
        except Exception:  # the user's method failing is the user's to see in their own call, not in kvlab's reading
            live = state.slots_allocated
        state.slots_live = min(max(live, 0), state.slots_allocated)
        state.slots_masked = state.slots_allocated - state.slots_live
    return state


@functools.cache
def _own_mask(layer_class: type) -> bool:
    """Whether a dynamic strategy tells the mask something of its own: with `DynamicLayer`'s `get_mask_sizes` and
    `get_seq_length` both, every stored slot is live, and asking costs a call per update for nothing."""
    dynamic = _compat.DynamicLayer
    return any(
        getattr(layer_class, name) is not getattr(dynamic, name) for name in ("get_mask_sizes", "get_seq_length")
    )


def _read_static_strategy(layer, layer_kind: str) -> LayerState:
    """A user's subclass of a static layer: its storage allocated up front, live what `get_seq_length` holds."""
    state = _strategy_state(layer, layer_kind)
    if state.slots_allocated:
        held = min(_user_int(layer.get_seq_length, state.slots_allocated), state.slots_allocated)
        state.slots_live, state.slots_masked = held, state.slots_allocated - held
        state.tokens_evicted = max(state.logical_length - held, 0) if state.logical_length is not None else None
    return state


def _strategy_state(layer, layer_kind: str) -> LayerState:
    """A strategy's bytes, stored slots and tokens seen (every slot live, none evicted past what it stores)."""
    keys, values = layer.keys, layer.values
    held, device = _strategy_bytes(layer, keys, values)
    if not held or not layer.is_initialized:
        layer.__dict__.pop(TOKENS_SEEN, None)  # emptied (a reset): the count starts again
        return empty_state(layer_kind)
    if type(keys) is not torch.Tensor or keys.dim() != 4:
        layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470)
        _warn_unread(layer_type)
        return LayerState(layer_kind, None, None, None, None, None, held, device)
    stored = keys.shape[-2]
    seen = layer.__dict__.get(TOKENS_SEEN)
    if seen is None:  # met already filled (watched mid-conversation): the layer's own count, at least what it holds
        seen = layer.__dict__[TOKENS_SEEN] = max(_user_int(layer.get_seq_length, stored), stored)
    return LayerState(layer_kind, seen, stored, stored, 0, max(seen - stored, 0), held, device)


# What a strategy's other attributes may be without holding any cached data (the fast path of `_strategy_bytes`).
_NO_DATA = (bool, int, float, str, type(None), torch.device)


def _strategy_bytes(layer, keys, values) -> tuple[int, str]:
    """(bytes of everything `layer` keeps, its device): keys and values alone when its other attributes hold only
    numbers, names and devices (checked on every read: a strategy may add a tensor at any step), else every tensor
    its attributes reach."""
    for value in layer.__dict__.values():  # kvlab's own count is an int
        if value is keys or value is values or type(value) in _NO_DATA:
            continue
        tensors = list(held_tensors(layer))
        return storage_bytes(tensors), device_name(tensors[0].device) if tensors else "none"
    if type(keys) is torch.Tensor and type(values) is torch.Tensor:
        return kv_storage_bytes(keys, values), str(keys.device)
    return 0, "none"


def _user_int(read: Callable[[], object], fallback: int) -> int:
    try:
        return int(read())  # type: ignore[call-overload]
    except Exception:  # the user's method failing is the user's to see in their own call, not in kvlab's reading
        return fallback


_STRATEGY_READERS = (_read_strategy, _read_static_strategy)


def count_tokens(layer, tokens: int) -> None:
    """Add `tokens` (an update's key_states seq length; negative for a crop) to a strategy layer's count of tokens
    seen; other layers count their own."""
    layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470)
    if tokens and (_READERS.get(layer_type) or _reader_for(layer_type)) in _STRATEGY_READERS:
        counts = layer.__dict__
        counts[TOKENS_SEEN] = max(counts.get(TOKENS_SEEN, 0) + tokens, 0)


def forget_tokens(layer) -> None:
    """Drop kvlab's count from a layer (the watch ends, or the layer was reset)."""
    layer.__dict__.pop(TOKENS_SEEN, None)


def _read_unknown(layer, layer_kind: str) -> LayerState:
    """Every byte the layer keeps, its slots unknown (None); a layer with no tensor yet holds no slots."""
    tensors = list(held_tensors(layer))
    held = storage_bytes(tensors)
    if not held:
        return empty_state(layer_kind)
    return LayerState(layer_kind, None, None, None, None, None, held, device_name(tensors[0].device))


Reader = Callable[[object, str], LayerState]


def _with_held_bytes(reader: Reader) -> Reader:
    """`reader`'s slots, with the bytes of everything the layer keeps (indexer keys, a hybrid's linear state)."""

    def read(layer, layer_kind: str) -> LayerState:
        state = reader(layer, layer_kind)
        tensors = list(held_tensors(layer))
        state.bytes_held = storage_bytes(tensors)
        if state.device == "none" and state.bytes_held:  # a hybrid's linear state, before its first keys
            state.device = device_name(tensors[0].device)
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


def read_after_update(layer_type: type) -> bool:
    """Whether a layer of this class is a dynamic one that keeps nothing beside its keys and values (learned on the
    class's first filled layer, `_check_once`): what it holds after an update says all the update did, so kvlab can
    read it later, at the step's end (`Recorder.defer`) or once the forward ended (`kvlab.caches.forward_read`)."""
    return _READERS.get(layer_type) is _read_dynamic


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


def is_strategy_class(layer_class: type) -> bool:
    """A class transformers does not ship that subclasses its dynamic or static layer (a quantized or linear-attention
    one excepted: what their keys hold is not what they hold): read by `_read_strategy`."""
    if layer_class in _known_classes() or not isinstance(layer_class, type):
        return False
    others = (_compat.BaseQuantizedLayer, _compat.LinearAttentionCacheLayerMixin)
    return issubclass(layer_class, (_compat.DynamicLayer, _compat.StaticLayer)) and not issubclass(layer_class, others)


def _reader_for(layer_type: type) -> Reader:
    """The reader of a layer class, decided once per class (isinstance on transformers' ABCs is slow)."""
    base = own_class(layer_type)
    reader, complete = _known_classes().get(base, (None, False))
    chosen: Reader
    if reader is None and is_strategy_class(base):
        chosen = _read_static_strategy if issubclass(base, _compat.StaticLayer) else _read_strategy
    elif reader is None:
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
    base = own_class(layer_type)
    if is_strategy_class(base):  # a user's changes what it keeps in `update`; a model's own (a transformers
        return not base.__module__.startswith("transformers.")  # modeling file's) may have buffers attention writes
    return _known_classes().get(base, (None, False))[1]


def read_layer(layer, layer_kind: str) -> LayerState:
    """Snapshot `layer`; `layer_kind` comes from the config."""
    layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470)
    reader = _READERS.get(layer_type)
    if reader is None:
        reader = _reader_for(layer_type)
    return reader(layer, layer_kind)
