"""Which layers a cache keeps on the compute device, and how many bytes, step by step, read from its trace.

An ordinary cache keeps every layer on the device. An offloaded one (`DynamicCache(..., offloading=True)`,
`StaticCache(..., offloading=True)`, `cache_implementation="offloaded"` / `"offloaded_static"`) keeps a layer
there from its creation or prefetch until its offload; a layer it never offloads (a sliding layer under
`offload_only_non_sliding=True`) stays there throughout. Walking the trace in the order the device saw the
events (`schedule`: prefetch i+1, update i, offload i; `effective_moves` leaves out prefetches of a layer already
there) gives, after every event, the set of resident layers (`resident_intervals`) and their bytes
(`device_bytes_by_step`). The largest sum within a step is what an accelerator had to hold at once; the sum
while the last update ran is what it holds as a generation goes (`device_bytes_at_last_update`, what
`kvlab.measure.resilient`'s simulated accelerator checks after every layer). This is kvlab's one count of
device-resident bytes.
`kvlab.plots.timeline` draws the same schedule.

On this CPU-only machine nothing moves: the numbers are the bytes that would be resident on an accelerator
running the same schedule.
"""

from __future__ import annotations

from kvlab.recording.trace import Trace


def resident_intervals(trace: Trace, steps: tuple[int, int] | None = None) -> list[dict]:
    """Intervals during which each layer is resident on the compute device, in event order.

    Returns [{"layer_idx", "start", "end", "step"}]: `start`/`end` index the events of `schedule(trace, steps)`.
    Intervals still resident when the window ends carry "open": True (the last layer prefetches the first one
    for the next step); a layer never offloaded in the window (a sliding layer with `offload_only_non_sliding`)
    is resident throughout and has "never_offloaded": True.
    """
    events = schedule(trace, steps)
    offloaded = {e["layer_idx"] for e in events if e["type"] == "transfer" and e["direction"] == "offload"}
    open_at: dict[int, int] = {}
    intervals = []
    for i, e in enumerate(events):
        layer = e["layer_idx"]
        if layer not in offloaded:
            open_at.setdefault(layer, 0)
        elif e["type"] == "update" and layer not in open_at:
            open_at[layer] = i  # created (prefill) or prefetched before the window
        elif e["type"] == "transfer" and e["direction"] == "prefetch" and layer not in open_at:
            open_at[layer] = i
        elif e["type"] == "transfer" and e["direction"] == "offload" and layer in open_at:
            intervals.append({"layer_idx": layer, "start": open_at.pop(layer), "end": i, "step": e["step"]})
    for layer, start in open_at.items():
        intervals.append(
            {
                "layer_idx": layer,
                "start": start,
                "end": len(events) - 1,
                "step": events[-1]["step"],
                "open": True,
                "never_offloaded": layer not in offloaded,
            }
        )
    return sorted(intervals, key=lambda r: (r["start"], r["layer_idx"]))


def effective_moves(trace: Trace) -> list[dict]:
    """The transfers that change where a layer lives: a prefetch of a layer already on the device is a no-op.

    transformers calls `prefetch(i + 1)` before every layer's update and it looks for the *next offloaded*
    layer, so with `offload_only_non_sliding` each sliding layer asks again for the same full layer. On an
    accelerator the repeated calls copy nothing; kvlab logs every call, and this keeps the real moves.
    """
    resident: set[int] = set()
    seen: set[int] = set()
    moves = []
    for e in trace.events:
        if e["type"] == "update":
            if e["layer_idx"] not in seen:
                resident.add(e["layer_idx"])  # a layer is created on the device
                seen.add(e["layer_idx"])
            continue
        if e["type"] != "transfer":
            continue
        layer = e["layer_idx"]
        first_time = layer not in seen  # its update is logged after this offload: it was created on the device
        seen.add(layer)
        if e["direction"] == "prefetch" and layer not in resident:
            resident.add(layer)
            moves.append(e)
        elif e["direction"] == "offload" and (layer in resident or first_time):
            resident.discard(layer)
            moves.append(e)
    return moves


def schedule(trace: Trace, steps: tuple[int, int] | None) -> list[dict]:
    """Updates and transfers in the order they happened on the device.

    The cache logs a layer's update after the update returns, by which time that layer has already been
    offloaded: the log reads [prefetch i+1, offload i, update i]; the device saw [prefetch i+1, update i,
    offload i]. The update is moved back before its own offload.
    """
    kept: list[dict] = []
    real = {id(e) for e in effective_moves(trace)}
    for e in trace.events:
        if e["type"] == "transfer" and id(e) not in real:
            continue  # a prefetch of a layer already on the device
        if e["type"] not in ("update", "transfer") or e.get("role", "self") != "self":
            continue
        if steps is not None and not steps[0] <= e["step"] <= steps[1]:
            continue
        previous = kept[-1] if kept else None
        if (
            e["type"] == "update"
            and previous is not None
            and previous["type"] == "transfer"
            and previous["direction"] == "offload"
            and previous["layer_idx"] == e["layer_idx"]
            and previous["step"] == e["step"]
        ):
            kept.insert(len(kept) - 1, e)
        else:
            kept.append(e)
    return kept


def _device_walk(trace: Trace):
    """Walk the schedule: after each event, (event, layer -> bytes it holds, resident layers, layer -> its kind).

    A layer is resident from its creation (its first update, at the prefill) or its prefetch to its offload; a
    prefetch brings the bytes it moved. The dicts are the walk's own, updated in place as it goes on."""
    held: dict[int, int] = {}  # layer -> bytes it holds now
    layer_kind: dict[int, str] = {}  # layer -> its layer kind
    resident: set[int] = set()
    for e in schedule(trace, None):
        layer = e["layer_idx"]
        if e["type"] == "update":
            held[layer], layer_kind[layer] = e["bytes_held"], e["layer_kind"]
            resident.add(layer)  # a layer computes on the device (created there at the prefill)
        elif e["direction"] == "prefetch":
            held[layer] = e["bytes"]
            resident.add(layer)
        else:
            resident.discard(layer)
        yield e, held, resident, layer_kind


def device_bytes_by_step(trace: Trace) -> list[dict]:
    """One row per step: the device peak and the whole cache.

    Returns [{"step", "device_peak_bytes", "cache_bytes_at_peak", "cache_bytes", "resident_at_peak" (layer
    indices), "device_bytes_by_layer_kind" ({"full": bytes, "sliding": bytes, ...} at the peak)}].
    `cache_bytes_at_peak` is the whole cache (device and CPU) at the moment of the device peak, `cache_bytes` at
    the end of the step (they differ when a layer shrinks during the step: a sliding layer's buffer still holds
    the whole prompt until its first decoding update).
    """
    rows: dict[int, dict] = {}
    cache_bytes: dict[int, int] = {}
    for e, held, resident, layer_kind in _device_walk(trace):
        if e["type"] == "update":
            cache_bytes[e["step"]] = e["cache_bytes"]
        total = sum(held.get(i, 0) for i in resident)
        row = rows.setdefault(e["step"], {"step": e["step"], "device_peak_bytes": -1})
        if total > row["device_peak_bytes"]:
            by_layer_kind: dict[str, int] = {}
            for i in resident:
                kind_i = layer_kind.get(i, "full")
                by_layer_kind[kind_i] = by_layer_kind.get(kind_i, 0) + held.get(i, 0)
            row.update(
                {
                    "device_peak_bytes": total,
                    "cache_bytes_at_peak": sum(held.values()),
                    "resident_at_peak": sorted(resident),
                    "device_bytes_by_layer_kind": by_layer_kind,
                }
            )
    for step, row in rows.items():
        row["cache_bytes"] = cache_bytes.get(step, 0)
    return [rows[s] for s in sorted(rows)]


def device_peak(trace: Trace) -> int:
    """The most bytes the cache held on the compute device at once, over the whole trace."""
    return max((r["device_peak_bytes"] for r in device_bytes_by_step(trace)), default=0)


def device_bytes_at_last_update(trace: Trace) -> int:
    """The bytes on the compute device while the last update ran: the layer that computed (offloaded since, but
    its tensors were in use) and every layer resident with it. What a live budget check asks after each layer
    (`kvlab.measure.resilient.simulated_device`); 0 before any update."""
    now = 0
    for e, held, resident, _ in _device_walk(trace):
        if e["type"] == "update":
            now = sum(held.get(i, 0) for i in resident)
    return now
