"""Bytes a cache keeps on the compute device, step by step, read from its trace.

An ordinary cache keeps every layer on the device. An offloaded one (`DynamicCache(..., offloading=True)`,
`StaticCache(..., offloading=True)`, `cache_implementation="offloaded"` / `"offloaded_static"`) keeps a layer
there from its creation or prefetch until its offload; a layer it never offloads (a sliding layer under
`offload_only_non_sliding=True`) stays there throughout. Walking the trace in the order the device saw the
events (`kvlab.plots.timeline.schedule`: prefetch i+1, update i, offload i) gives, after every event, the set of
resident layers and their bytes. The largest sum within a step is what an accelerator had to hold at once.

On this CPU-only machine nothing moves: the numbers are the bytes that would be resident on an accelerator
running the same schedule.
"""

from __future__ import annotations

from kvlab.trace import Trace


def device_bytes_by_step(trace: Trace) -> list[dict]:
    """One row per step: the device peak and the whole cache.

    Returns [{"step", "device_peak_bytes", "cache_bytes_at_peak", "cache_bytes", "resident_at_peak" (layer
    indices), "device_bytes_by_kind" ({"full": bytes, "sliding": bytes, ...} at the peak)}].
    `cache_bytes_at_peak` is the whole cache (device and CPU) at the moment of the device peak, `cache_bytes` at
    the end of the step (they differ when a layer shrinks during the step: a sliding layer's buffer still holds
    the whole prompt until its first decoding update).
    """
    from kvlab.plots.timeline import schedule  # device order; no-op prefetches left out

    held: dict[int, int] = {}  # layer -> bytes it holds now
    kind: dict[int, str] = {}
    resident: set[int] = set()
    rows: dict[int, dict] = {}
    cache_bytes: dict[int, int] = {}
    for e in schedule(trace, None):
        layer = e["layer_idx"]
        if e["type"] == "update":
            held[layer], kind[layer] = e["bytes_held"], e["kind"]
            cache_bytes[e["step"]] = e["cache_bytes"]
            resident.add(layer)  # a layer computes on the device (created there at the prefill)
        elif e["direction"] == "prefetch":
            held[layer] = e["bytes"]
            resident.add(layer)
        else:
            resident.discard(layer)
        total = sum(held.get(i, 0) for i in resident)
        row = rows.setdefault(e["step"], {"step": e["step"], "device_peak_bytes": -1})
        if total > row["device_peak_bytes"]:
            by_kind: dict[str, int] = {}
            for i in resident:
                by_kind[kind.get(i, "full")] = by_kind.get(kind.get(i, "full"), 0) + held.get(i, 0)
            row.update(
                {
                    "device_peak_bytes": total,
                    "cache_bytes_at_peak": sum(held.values()),
                    "resident_at_peak": sorted(resident),
                    "device_bytes_by_kind": by_kind,
                }
            )
    for step, row in rows.items():
        row["cache_bytes"] = cache_bytes.get(step, 0)
    return [rows[s] for s in sorted(rows)]


def device_peak(trace: Trace) -> int:
    """The most bytes the cache held on the compute device at once, over the whole trace."""
    return max((r["device_peak_bytes"] for r in device_bytes_by_step(trace)), default=0)
