"""The `Recorder` turns layer snapshots into trace events and keeps the step count.

A cache never learns when a forward starts: every layer updates once per forward, so seeing a (role, layer, op)
again means a new step began. Step 0 is the prefill.
"""

from __future__ import annotations

from kvlab.measure.timing import clock as now  # the per-update `seconds` and step starts of a trace
from kvlab.recording.layer_state import LayerState, read_layer
from kvlab.recording.trace import Trace
from kvlab.recording.work import NO_WORK


class Recorder:
    def __init__(self, trace: Trace | None = None):
        self.trace = trace if trace is not None else Trace()
        self.step = 0
        self._seen: set[tuple] = set()
        self._states: dict[tuple, LayerState] = {}
        self._total_bytes = 0  # sum of bytes_held over self._states
        # the whole cache's storage when known at once (a pool allocated up front), else None: `_total_bytes`
        self.cache_bytes: int | None = None

    def begin(self, role: str, layer_idx: int, op: str) -> None:
        key = (role, layer_idx, op)
        if key in self._seen:
            self.step += 1
            self._seen.clear()
        if not self._seen:  # the first update of a forward: when the step started (`Trace.step_seconds`)
            starts = self.trace.meta.setdefault("step_started_s", [])
            if len(starts) <= self.step:
                starts.extend([None] * (self.step - len(starts)) + [now()])
        self._seen.add(key)

    def state(self, role: str, layer_idx: int) -> LayerState | None:
        return self._states.get((role, layer_idx))

    def total_bytes(self) -> int:
        return self._total_bytes

    def record_update(
        self, role, layer_idx, layer, layer_kind, op, tokens_added, seconds, work: dict | None = None
    ) -> LayerState:
        return self.record_state(role, layer_idx, read_layer(layer, layer_kind), op, tokens_added, seconds, work)

    def record_state(
        self, role, layer_idx, state: LayerState, op, tokens_added, seconds, work=None, extra: dict | None = None
    ) -> LayerState:
        """One update event from a `state` the caller read itself (the paged cache's block pool, or `record_update`).

        `work`: a tuple in `WORK_FIELDS` order or a dict (none when omitted); `extra`: the cache's own fields, after
        the work. The values are kept as they are and become a dict when the trace is read (`Trace.events`)."""
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
        self.trace.record_update(
            (self.step, layer_idx, role, op, int(tokens_added), evicted, seconds, total, state, work, extra)
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

    def record_crop(self, role, n, past_recording, before: list[int], after: list[int]) -> None:
        self.trace.record(
            {
                "type": "crop",
                "step": self.step,
                "role": role,
                "n": int(n),
                "past_recording": past_recording,
                "lengths_before": before,
                "lengths_after": after,
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
