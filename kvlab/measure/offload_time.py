"""What offloading costs: the bytes its schedule hands over each step (exact), and what they would cost over PCIe
(an estimate). On a CPU every move is CPU -> CPU and copies nothing (`moved=False`), yet they are the bytes a GPU
would copy, so they are counted whatever `moved` says."""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.i18n import _
from kvlab.measure.residency import effective_moves
from kvlab.recording.trace import Trace

# An assumption, not a measurement: PCIe 4.0 x16 carries 32 GB/s raw per direction (31.5 GB/s after its
# 128b/130b encoding); host <-> device copies of pinned memory typically reach about 25 GB/s of it.
PCIE4_X16_EFFECTIVE_BYTES_PER_S = 25e9


def transfer_bytes_by_step(trace: Trace) -> list[dict]:
    """One row per step of the trace: {"step", "offload_bytes", "prefetch_bytes", "bytes", "moves"}. A step's
    prefetch of layer 0 for the next step is counted in the step that issues it."""

    def empty(step: int) -> dict:
        return {"step": step, "offload_bytes": 0, "prefetch_bytes": 0, "bytes": 0, "moves": 0}

    rows = {e["step"]: empty(e["step"]) for e in trace.updates}
    for e in effective_moves(trace):
        row = rows.setdefault(e["step"], empty(e["step"]))
        row[f"{e['direction']}_bytes"] += int(e["bytes"])
        row["bytes"] += int(e["bytes"])
        row["moves"] += 1
    return [rows[s] for s in sorted(rows)]


def offload_traffic(trace: Trace) -> dict:
    """The traffic of one generation, summed. Offloads are also counted alone: transformers queues them on the
    compute stream, the prefetches on a side stream. `crossed_bytes`: the moves that changed device (0 on a CPU)."""
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
    bandwidth: float

    @property
    def seconds(self) -> float:
        """The copy time if no transfer overlapped compute (the most offloading could add to a step)."""
        return self.bytes / self.bandwidth


def pcie_estimate(nbytes: float, bandwidth: float = PCIE4_X16_EFFECTIVE_BYTES_PER_S) -> PcieEstimate:
    """`nbytes` over a bus of `bandwidth` bytes/s (default: an assumed 25 GB/s, PCIe 4.0 x16 effective)."""
    if bandwidth <= 0:
        raise ValueError(_("bandwidth must be positive bytes per second; got {bandwidth}").format(bandwidth=bandwidth))
    if nbytes < 0:
        raise ValueError(_("nbytes must not be negative; got {nbytes}").format(nbytes=nbytes))
    return PcieEstimate(float(nbytes), float(bandwidth))
