"""What offloading costs: the bytes its schedule hands over each step (exact), the decode time per token with
and without it (measured, `kvlab.measure.timing`), and what those bytes would cost over PCIe (an estimate).

The decode time is `kvlab.measure.step_times.decode_step_times` (the one decode-timing loop), run inside
`kvlab.watch` (an offloaded cache runs nowhere else on a CPU-only torch).

An offloaded cache (`cache_implementation="offloaded"` / `"offloaded_static"`, `DynamicCache(...,
offloading=True)`) prefetches each offloaded layer before its update and offloads it after: the bytes of every
such move are in the trace's "transfer" events. On a CPU-only machine every move is CPU -> CPU, so the events
carry `moved=False` and `Trace.work_by_step()` counts 0 offload and prefetch bytes; yet they are the bytes the
same schedule copies between host and accelerator on a GPU. `transfer_bytes_by_step` counts them whatever
`moved` says, keeping only the moves that change where a layer lives (`residency.effective_moves`: a prefetch
of a layer already on the device copies nothing, on a GPU as on a CPU).

A CPU -> CPU move tells nothing about the bus: `tensor.to("cpu")` of a CPU tensor returns that very tensor, no
byte is copied, so a CPU timing of the offloaded cache measures only the schedule's bookkeeping.
`pcie_estimate` turns the exact bytes into seconds at a bandwidth the caller states: an estimate, not a
measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.measure.residency import effective_moves
from kvlab.recording.trace import Trace

# An assumption, not a measurement: PCIe 4.0 x16 carries 32 GB/s raw per direction (31.5 GB/s after its
# 128b/130b encoding); host <-> device copies of pinned memory typically reach about 25 GB/s of it.
PCIE4_X16_EFFECTIVE_BYTES_PER_S = 25e9


def transfer_bytes_by_step(trace: Trace) -> list[dict]:
    """One row per step: {"step", "offload_bytes", "prefetch_bytes", "bytes", "moves"}.

    The bytes of the moves that change where a layer lives, counted whether or not the move crossed devices
    (on a CPU it does not; on a GPU each of these bytes crosses PCIe). A step's prefetch of layer 0 for the next
    step is counted in the step that issues it. Every step of the trace has a row (0 for an ordinary cache).
    """
    rows = {s: {"step": s, "offload_bytes": 0, "prefetch_bytes": 0, "bytes": 0, "moves": 0} for s in _steps(trace)}
    for e in effective_moves(trace):
        row = rows.setdefault(
            e["step"], {"step": e["step"], "offload_bytes": 0, "prefetch_bytes": 0, "bytes": 0, "moves": 0}
        )
        row[f"{e['direction']}_bytes"] += int(e["bytes"])
        row["bytes"] += int(e["bytes"])
        row["moves"] += 1
    return [rows[s] for s in sorted(rows)]


def offload_traffic(trace: Trace) -> dict:
    """The traffic of one generation, summed: {"steps", "batch", "generated_tokens", "total_bytes",
    "decode_steps", "decode_bytes", "bytes_per_decode_step", "offload_bytes_per_decode_step",
    "bytes_per_generated_token", "crossed_bytes"}.

    Every step (forward) generates one token per sequence, so `generated_tokens` is steps x batch. Decode steps
    are the steps after the prefill (step 0); `bytes_per_decode_step` is their mean (it grows with the
    sequence), `offload_bytes_per_decode_step` the mean of their offloads alone (transformers queues those on
    the compute stream; the prefetches run on a side stream). `crossed_bytes` counts only the moves whose source
    and destination differ (`moved`): 0 on a CPU.
    """
    rows = transfer_bytes_by_step(trace)
    batch = max((e.get("batch") or 0 for e in trace.updates), default=0) or 1
    decode = [r for r in rows if r["step"] > 0]
    total = sum(r["bytes"] for r in rows)
    decode_bytes = sum(r["bytes"] for r in decode)
    generated = len(rows) * batch
    return {
        "steps": len(rows),
        "batch": batch,
        "generated_tokens": generated,
        "total_bytes": total,
        "decode_steps": len(decode),
        "decode_bytes": decode_bytes,
        "bytes_per_decode_step": decode_bytes / len(decode) if decode else 0.0,
        "offload_bytes_per_decode_step": sum(r["offload_bytes"] for r in decode) / len(decode) if decode else 0.0,
        "bytes_per_generated_token": total / generated if generated else 0.0,
        "crossed_bytes": sum(int(e["bytes"]) for e in effective_moves(trace) if e["moved"]),
    }


@dataclass(frozen=True)
class PcieEstimate:
    """Seconds that `bytes` take at `bandwidth` bytes/s: an estimate from an assumed bandwidth, not measured."""

    bytes: float
    bandwidth: float  # bytes per second, stated by the caller

    @property
    def seconds(self) -> float:
        """The copy time if no transfer overlapped compute (the most offloading could add to a step)."""
        return self.bytes / self.bandwidth


def pcie_estimate(nbytes: float, bandwidth: float = PCIE4_X16_EFFECTIVE_BYTES_PER_S) -> PcieEstimate:
    """`nbytes` over a bus of `bandwidth` bytes/s (default: an assumed 25 GB/s, PCIe 4.0 x16 effective)."""
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive bytes per second; got {bandwidth}")
    if nbytes < 0:
        raise ValueError(f"nbytes must not be negative; got {nbytes}")
    return PcieEstimate(float(nbytes), float(bandwidth))


def _steps(trace: Trace) -> list[int]:
    return sorted({e["step"] for e in trace.updates})
