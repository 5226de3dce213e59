"""The `Recorder` turns layer snapshots into trace events and keeps the step count.

A cache never learns when a forward starts: every layer updates once per forward, so seeing a (role, layer, op)
again means a new step began. Step 0 is the prefill.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kvlab.measure.timing import clock as now  # the per-update `seconds` and step starts of a trace
from kvlab.recording.layer_state import LayerState, read_dynamic, read_layer
from kvlab.recording.storage import Outside
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
        self.trace.before_read = self.flush

    def begin(self, role: str, layer_idx: int, op: str) -> None:
        key = (role, layer_idx, op)
        if key in self._seen:
            if self._pending:  # the step's deferred updates, before anything of the next one
                self.flush()
            if self._outside_readers:  # what the forward that ended changed beside the layers, at its own step
                self.read_outside()
            self.step += 1
            self._seen.clear()
        if not self._seen:  # the first update of a forward: when the step started (`Trace.step_seconds`)
            starts = self.trace.meta.setdefault("step_started_s", [])
            if len(starts) <= self.step:
                starts.extend([None] * (self.step - len(starts)) + [now()])
        self._seen.add(key)

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
        `flush` reads is what the update left, and the update's work follows from it (`_dynamic_work`). Everything
        that reads or adds to the record flushes first: the events come out in the order, with the values,
        `record_update` gives."""
        self._pending.append((cache, layer_idx, seconds))

    def flush(self) -> None:
        """Read the layers of the updates `defer` kept, in their order, and log each one's event."""
        pending, self._pending = self._pending, []
        for cache, layer_idx, seconds in pending:
            role, layer = cache.kvlab_role, cache.layers[layer_idx]
            state = read_dynamic(layer, cache._kvlab_layer_kind(layer_idx))
            work = _dynamic_work(layer, state, self._states.get((role, layer_idx)), cache._kvlab_query_heads, layer_idx)
            self.record_state(role, layer_idx, state, "kv", work[1], seconds, work)

    def record_state(
        self, role, layer_idx, state: LayerState, op, tokens_added, seconds, work=None, extra: dict | None = None
    ) -> LayerState:
        """One update event from a `state` the caller read itself (the paged cache's block pool, or `record_update`).

        `work`: a tuple in `WORK_FIELDS` order or a dict (none when omitted); `extra`: the cache's own fields, after
        the work. The values are kept as they are and become a dict when the trace is read (`Trace.events`)."""
        if self._pending:
            self.flush()
        key = (role, layer_idx)
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
        self.trace.record_update(
            (self.step, layer_idx, role, op, int(tokens_added), evicted, seconds, total, shown, work, extra)
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
        return state

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


def _dynamic_work(layer, state: LayerState, before: LayerState | None, query_heads, layer_idx: int) -> tuple:
    """`attention_counts` of a dynamic layer's last update, from what it holds after it: the update took in the
    tokens its count grew by and handed attention every key it kept before plus those (`DynamicLayer` returns its
    concatenation; a sliding one trims it after)."""
    seen_before, kept_before = (before.logical_length, before.slots_allocated) if before else (0, 0)
    queries = (state.logical_length or 0) - (seen_before or 0)  # a dynamic layer always counts its tokens
    if not state.slots_allocated:  # nothing stored, no keys read: `attention_counts` of no 4-D keys
        return (0, queries, 0, 0, *NO_PACKING)
    batch, kv_heads, _, key_dim = layer.keys.shape  # (batch, kv_heads, stored, head_dim)
    slots = (kept_before or 0) + queries
    heads = layer_heads(query_heads, layer_idx) or kv_heads
    flops = 2 * batch * heads * queries * slots * (key_dim + layer.values.shape[-1])
    return (batch, queries, slots, flops, *NO_PACKING)
