"""The `Recorder` turns layer snapshots into trace events and keeps the step count.

A cache never learns when a forward starts: every layer updates once per forward, so seeing a (role, layer, op)
again means a new step began. Step 0 is the prefill.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable

from torch import Tensor

from kvlab import _compat
from kvlab.measure.timing import clock as now  # the per-update `seconds` and step starts of a trace
from kvlab.recording.layer_state import LayerState, device_name, empty_state, read_layer
from kvlab.recording.storage import Outside, kv_storage_bytes
from kvlab.recording.trace import Trace
from kvlab.recording.work import NO_WORK, QUANT_FIELDS, layer_heads

NO_PACKING = (0,) * len(QUANT_FIELDS)


class Recorder:
    def __init__(self, trace: Trace | None = None):
        self.trace = trace if trace is not None else Trace()
        self.step = 0
        self._seen: set[tuple] = set()
        self._states: dict[tuple, LayerState] = {}
        self._total_bytes = 0  # sum of bytes_held over self._states
        # the whole cache's storage when known at once (a pool allocated up front), else None: `_total_bytes`
        self.cache_bytes: int | None = None
        # What the caches hold beside their `layers` (MiniMax's `linear_cache`): read once per step, not per update
        self._outside_readers: list[Callable[[Recorder], None]] = []
        self._outside: dict[tuple, int] = {}  # (role, layer_idx) -> bytes paired with that layer
        self._outside_named: dict[tuple, int] = {}  # (role, attribute) -> bytes paired with no layer
        self._pending: list[tuple] = []  # updates `defer` logs at the step's end
        self._forward_reads: list[tuple] = []  # caches `read_after_forward` reads at the next flush
        self._keys_kept: tuple | None = None  # (cache, weakly; its layers' keys, weakly; `trace.recorded`): `keep_keys`
        self.trace.before_read = self.flush

    def begin(self, role: str, layer_idx: int, op: str, started: float | None = None) -> float:
        """Count a new step where (role, layer, op) comes again; return the clock, when the update starts.

        `started`: when the step began, where the caller knows better than now (a forward read after it ended)."""
        key, seen = (role, layer_idx, op), self._seen
        if key in seen:
            if self._pending:  # the step's deferred updates, before anything of the next one
                self.flush()
            if self._outside_readers:  # what the forward that ended changed beside the layers, at its own step
                self.read_outside()
            self.step += 1
            seen.clear()
        if not seen:  # the first update of a forward: when the step started (`Trace.step_seconds`)
            starts = self.trace.meta.setdefault("step_started_s", [])
            if len(starts) <= self.step:
                starts.extend([None] * (self.step - len(starts)) + [now() if started is None else started])
        seen.add(key)
        return now()

    def state(self, role: str, layer_idx: int) -> LayerState | None:
        if self._pending:
            self.flush()
        return self._states.get((role, layer_idx))

    def total_bytes(self) -> int:
        if self._pending:
            self.flush()
        return self._total_bytes

    def record_update(
        self, role, layer_idx, layer, layer_kind, op, tokens_added, seconds, work: dict | None = None
    ) -> LayerState:
        return self.record_state(role, layer_idx, read_layer(layer, layer_kind), op, tokens_added, seconds, work)

    def defer(self, cache, layer_idx: int, seconds: float) -> None:
        """Log a key/value update of a plain dynamic layer of `cache` at the step's end instead of now.

        Why later: this runs once per layer per decoded token, right after a decoder layer's weights have swept the
        CPU caches, so each object it touches is a cold read, several times its cost in a loop; `flush` reads the
        step's layers in one warm loop instead (issue 41). A dynamic layer changes only in its own update, so what
        `flush` reads is what the update left, and the update's work follows from it (`_dynamic_update`). Everything
        that reads or adds to the record flushes first: the events come out in the order, with the values,
        `record_update` gives."""
        self._pending.append((cache, layer_idx, seconds))

    def read_after_forward(self, cache, resting_class: type, keys: list, started: float) -> None:
        """Log the updates a forward makes to `cache`'s plain dynamic layers once it ended, not as each one happens.

        Why: under `kvlab.watch`, the default `DynamicCache` runs its forwards as a class with transformers' own
        `update` (no kvlab frame per layer per token, the bulk of what watching cost, issue 41). `keys`: each
        layer's keys as the forward begins, kept weakly (`layer_keys`: no tensor outlives its layer), so that the next
        `flush` knows which layers the forward updated. A plain dynamic layer's `update` always stores new key
        tensors, so a layer whose keys are not the ones kept was updated, once (a forward updates each layer once),
        and `_dynamic_update` reads its event and work exactly as `defer`'s flush does; only the update's own
        `seconds` is unknown (null). The next flush, whoever asks for it, puts `resting_class` back first: what the
        forward still does then is recorded update by update."""
        self._forward_reads.append((cache, resting_class, keys, started))

    def keep_keys(self, cache, keys: list) -> None:
        """Keep `cache`'s layers' keys as a forward read left them (`layer_keys`' form) with the record's length:
        `keys_after_read` hands them to the next forward read while nothing was recorded since."""
        self._keys_kept = (weakref.ref(cache), keys, self.trace.recorded)  # weakly: a deepcopy's is not its own

    def keys_after_read(self, cache) -> list | None:
        """The layers' keys `keep_keys` kept for `cache`, if nothing was recorded since: then no layer changed (any
        change a cache method makes is recorded), and the forward about to run starts from them. Why: a look at
        every layer as a forward begins is a cold read of each, about a sixth of what watching cost (issue 41)."""
        kept = self._keys_kept
        if kept is None or kept[0]() is not cache or kept[2] != self.trace.recorded:
            return None
        return kept[1]

    def _read_forwards(self) -> None:
        """Log each layer the kept forwards updated (its keys are not the ones kept), read in one pass, and keep
        the keys it leaves for the next forward."""
        reads, self._forward_reads = self._forward_reads, []
        for cache, resting_class, _keys, _started in reads:
            cache.__class__ = resting_class
        for cache, _resting_class, keys, started in reads:
            left = []  # each layer's keys as the forward left them, weakly: where the next forward starts
            for layer_idx, layer in enumerate(cache.layers):
                kept = keys[layer_idx] if layer_idx < len(keys) else None
                current = getattr(layer, "keys", None)
                if current is (None if kept is None else kept()):
                    left.append(kept)
                    continue  # not updated by the forward
                left.append(_weak(current))
                self.begin(cache.kvlab_role, layer_idx, "kv", started)
                self._log_dynamic(cache, layer_idx, layer, None)
            self.keep_keys(cache, left)

    def flush(self) -> None:
        """Log the updates `defer` kept, then those of the forwards `read_after_forward` kept: in the order they
        happened (what a forward read keeps comes after anything deferred before its forward began)."""
        if self._pending:
            pending, self._pending = self._pending, []
            for cache, layer_idx, seconds in pending:
                self._log_dynamic(cache, layer_idx, cache.layers[layer_idx], seconds)
        if self._forward_reads:
            self._read_forwards()

    def _log_dynamic(self, cache, layer_idx: int, layer, seconds: float | None) -> None:
        """Log an update of `cache`'s plain dynamic layer `layer_idx` from what it holds now (`_dynamic_update`)."""
        kind = cache._kvlab_layer_kind(layer_idx)
        key = (cache.kvlab_role, layer_idx)
        state, work = _dynamic_update(layer, kind, self._states.get(key), cache._kvlab_query_heads, layer_idx)
        self._log(key, state, "kv", work[1], seconds, work, None)

    def record_state(
        self, role, layer_idx, state: LayerState, op, tokens_added, seconds, work=None, extra: dict | None = None
    ) -> LayerState:
        """One update event from a `state` the caller read itself (the paged cache's block pool, or `record_update`).

        `work`: a tuple in `WORK_FIELDS` order or a dict (none when omitted); `extra`: the cache's own fields, after
        the work. The values are kept as they are and become a dict when the trace is read (`Trace.events`)."""
        if self._pending:
            self.flush()
        self._log((role, layer_idx), state, op, tokens_added, seconds, work, extra)
        return state

    def _log(self, key: tuple, state: LayerState, op, tokens_added, seconds, work, extra) -> None:
        """`record_state` once nothing is pending: keep `state` as layer `key`'s (role, layer_idx) and log its event."""
        before = self._states.get(key)
        self._states[key] = state
        evicted_now = state.tokens_evicted  # None where kvlab cannot read the layer's slots
        if before is None:
            self._total_bytes += state.bytes_held
        else:
            self._total_bytes += state.bytes_held - before.bytes_held
            if evicted_now is not None and before.tokens_evicted is not None:
                evicted_now -= before.tokens_evicted
        evicted = evicted_now if evicted_now is None or evicted_now > 0 else 0
        total = self._total_bytes if self.cache_bytes is None else self.cache_bytes
        work = NO_WORK if work is None else work
        shown = state
        if self._outside and self._outside.get(key):  # the layer's bytes held beside `layers`, in its event
            shown = dataclasses.replace(state, bytes_held=state.bytes_held + self._outside[key])
        role, layer_idx = key
        # The event keeps the state's values, not the `LayerState`: a tuple of plain values leaves the garbage
        # collector's lists at its first collection, so a long trace adds nothing to what a full collection walks.
        # Kept as objects, a 16 + 512 run's events set off a full collection of the process (0.25 s, issue 41).
        self.trace.record_update(
            (self.step, layer_idx, role, op, int(tokens_added), evicted, seconds, total, shown.as_tuple(), work, extra)
        )
        if before is not None and state.quantized_tokens > before.quantized_tokens and before.residual_tokens > 0:
            self.trace.record(
                {
                    "type": "flush",
                    "step": self.step,
                    "layer_idx": layer_idx,
                    "role": role,
                    "residual_tokens_flushed": before.residual_tokens,
                    "quantized_tokens": state.quantized_tokens,
                }
            )

    def read_outside(self) -> None:
        """Read now what every cache of this recorder holds beside its `layers` (`add_outside_reader`'s readers)."""
        if self._pending:
            self.flush()
        for read in self._outside_readers:
            read(self)

    def add_outside_reader(self, read: Callable[[Recorder], None]) -> None:
        """`read(recorder)` reads a cache's state beside its layers and calls `record_outside`: at each step's end."""
        self._outside_readers.append(read)

    def record_outside(self, role: str, outside: Outside, state_of: Callable[[int], LayerState]) -> None:
        """Bytes held beside the layers: a layer whose share changed gets an "outside" update event (its own state,
        `state_of(i)` when it has none yet, plus that share); bytes paired with no layer go into every later event's
        `cache_bytes` and the trace's meta `bytes_outside_layers`."""
        if self._pending:
            self.flush()
        changed = [
            i
            for i in sorted({i for r, i in self._outside if r == role} | outside.by_layer.keys())
            if outside.by_layer.get(i, 0) != self._outside.get((role, i), 0)
        ]
        for name in {n for r, n in self._outside_named if r == role} | outside.by_name.keys():
            nbytes = outside.by_name.get(name, 0)
            self._total_bytes += nbytes - self._outside_named.get((role, name), 0)
            self._outside_named[(role, name)] = nbytes
            self.trace.meta.setdefault("bytes_outside_layers", {})[name if role == "self" else f"{role}.{name}"] = (
                nbytes
            )
        for i in changed:
            key = (role, i)
            if key not in self._states:
                self._states[key] = state_of(i)
                self._total_bytes += self._states[key].bytes_held
            nbytes = outside.by_layer.get(i, 0)
            self._total_bytes += nbytes - self._outside.get(key, 0)
            self._outside[key] = nbytes
            self.record_state(role, i, self._states[key], "outside", 0, 0.0)

    def record_crop(
        self, role, n, past_recording, before: list[int], after: list[int], recurrent_states_restored: int = 0
    ) -> None:
        self.trace.record(
            {
                "type": "crop",
                "step": self.step,
                "role": role,
                "n": int(n),
                "past_recording": past_recording,
                "lengths_before": before,
                "lengths_after": after,
                # linear-attention states put back from their recorded history (transformers 5.25's rollback)
                "recurrent_states_restored": int(recurrent_states_restored),
            }
        )

    def record_transfer(self, role, layer_idx, direction, nbytes, seconds, src, dst) -> None:
        self.trace.record(
            {
                "type": "transfer",
                "step": self.step,
                "layer_idx": layer_idx,
                "role": role,
                "direction": direction,
                "bytes": int(nbytes),
                "seconds": seconds,
                "src": src,
                "dst": dst,
                "moved": src != dst,
            }
        )


def layer_keys(cache) -> list:
    """Each of `cache`'s layers' keys now, weakly (None for a layer without them): what a forward read compares the
    layers with once the forward ended, without keeping a tensor alive past its layer."""
    return [_weak(getattr(layer, "keys", None)) for layer in cache.layers]


def _weak(tensor) -> weakref.ref | None:
    return None if tensor is None else weakref.ref(tensor)


def _dynamic_update(layer, layer_kind: str, before: LayerState | None, query_heads, layer_idx: int) -> tuple:
    """(`read_dynamic`'s state of a dynamic layer, `attention_counts` of its last update) in one pass over the layer's
    fields: this runs once per layer per decoded token, where every attribute read is a cold one (issue 41).

    The work follows from what the layer holds after the update: it took in the tokens its count grew by and handed
    attention every key it kept before plus those (`DynamicLayer` returns its concatenation; a sliding one trims it
    after)."""
    if not layer.is_initialized:
        return empty_state(layer_kind), (0, 0, 0, 0, *NO_PACKING)
    keys, values = layer.keys, layer.values
    shape = keys.shape  # (batch, kv_heads, stored, head_dim)
    if type(layer) is _compat.DynamicLayer and type(keys) is Tensor and type(values) is Tensor and len(shape) == 4:
        # A plain layer's update replaced both by torch.cat's new tensors, each all of its own storage: their sizes
        # are their storages' (`kv_storage_bytes`), and its length is what they hold (`get_seq_length`)
        nbytes = keys.nbytes + values.nbytes
        stored = shape[2]
        length = stored if nbytes else 0  # `get_seq_length` counts no tokens in empty tensors
    else:
        length = int(layer.get_seq_length())
        stored = shape[-2] if len(shape) >= 3 else 0
        nbytes = kv_storage_bytes(keys, values)
    state = LayerState(layer_kind, length, stored, stored, 0, max(length - stored, 0), nbytes, device_name(keys.device))
    seen_before, kept_before = (before.logical_length or 0, before.slots_allocated or 0) if before else (0, 0)
    queries = length - seen_before  # a dynamic layer always counts its tokens
    if not stored:  # nothing stored, no keys read: `attention_counts` of no 4-D keys
        return state, (0, queries, 0, 0, *NO_PACKING)
    batch, kv_heads, _, key_dim = shape
    slots = kept_before + queries
    heads = (query_heads if type(query_heads) is int else layer_heads(query_heads, layer_idx)) or kv_heads
    flops = 2 * batch * heads * queries * slots * (key_dim + values.shape[-1])
    return state, (batch, queries, slots, flops, *NO_PACKING)
