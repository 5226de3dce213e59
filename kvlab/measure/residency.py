"""Which layers a cache keeps on the compute device, and how many bytes, step by step: kvlab's one count of
device-resident bytes. An offloaded cache keeps a layer there from its creation or prefetch until its offload. On
a CPU-only machine nothing moves: the numbers are what an accelerator running the same schedule would hold."""

from __future__ import annotations

from kvlab.recording.trace import Trace


def resident_intervals(trace: Trace, steps: tuple[int, int] | None = None) -> list[dict]:
    """[{"layer_idx", "start", "end", "step"}], `start`/`end` indexing the events of `schedule(trace, steps)`;
    "open": True while still resident when the window ends, "never_offloaded": True if resident throughout."""
    events = schedule(trace, steps)
    offloaded = {e["layer_idx"] for e in events if e["type"] == "transfer" and e["direction"] == "offload"}
    open_at: dict[int, int] = {}
    intervals = []
    for i, e in enumerate(events):
        layer = e["layer_idx"]
        if layer not in offloaded:
            open_at.setdefault(layer, 0)
        elif e["type"] == "update" or e["direction"] == "prefetch":
            open_at.setdefault(layer, i)  # created (prefill), prefetched, or resident since before the window
        elif layer in open_at:
            intervals.append({"layer_idx": layer, "start": open_at.pop(layer), "end": i, "step": e["step"]})
    for layer, start in open_at.items():
        end = {"end": len(events) - 1, "step": events[-1]["step"], "open": True}
        intervals.append({"layer_idx": layer, "start": start, **end, "never_offloaded": layer not in offloaded})
    return sorted(intervals, key=lambda r: (r["start"], r["layer_idx"]))


def effective_moves(trace: Trace) -> list[dict]:
    """The transfers that change where a layer lives: with `offload_only_non_sliding`, each sliding layer's
    `prefetch(i + 1)` asks again for the next full layer, a no-op that kvlab logs anyway."""
    resident: set[int] = set()
    seen: set[int] = set()
    moves = []
    for e in trace.events:
        if e["type"] not in ("update", "transfer"):
            continue
        layer = e["layer_idx"]
        first_time = layer not in seen  # a layer is created on the device; its update is logged after its offload
        seen.add(layer)
        if e["type"] == "update":
            if first_time:
                resident.add(layer)
        elif e["direction"] == "prefetch" and layer not in resident:
            resident.add(layer)
            moves.append(e)
        elif e["direction"] == "offload" and (layer in resident or first_time):
            resident.discard(layer)
            moves.append(e)
    return moves


def schedule(trace: Trace, steps: tuple[int, int] | None) -> list[dict]:
    """Updates and effective transfers in the order the device saw them: the cache logs an update after it returns,
    so the log's [prefetch i+1, offload i, update i] was [prefetch i+1, update i, offload i] on the device."""
    kept: list[dict] = []
    real = {id(e) for e in effective_moves(trace)}
    for e in trace.events:
        if e["type"] == "transfer" and id(e) not in real:
            continue
        if e["type"] not in ("update", "transfer") or e.get("role", "self") != "self":
            continue
        if steps is not None and not steps[0] <= e["step"] <= steps[1]:
            continue
        previous = kept[-1] if kept else {"type": None}
        if (
            e["type"] == "update"
            and previous["type"] == "transfer"
            and previous["direction"] == "offload"
            and (previous["layer_idx"], previous["step"]) == (e["layer_idx"], e["step"])
        ):
            kept.insert(len(kept) - 1, e)
        else:
            kept.append(e)
    return kept


def _device_walk(trace: Trace):
    """After each event of the schedule: (event, layer -> bytes it holds, resident layers, layer -> its kind),
    the dicts updated in place as the walk goes on."""
    held: dict[int, int] = {}
    layer_kind: dict[int, str] = {}
    resident: set[int] = set()
    for e in schedule(trace, None):
        layer = e["layer_idx"]
        if e["type"] == "update":
            held[layer], layer_kind[layer] = e["bytes_held"], e["layer_kind"]
            resident.add(layer)
        elif e["direction"] == "prefetch":
            held[layer] = e["bytes"]
            resident.add(layer)
        else:
            resident.discard(layer)
        yield e, held, resident, layer_kind


def device_bytes_by_step(trace: Trace) -> list[dict]:
    """One row per step: the device peak, and the whole cache (device and CPU) at that peak and at the end of the
    step (a sliding layer's buffer holds the whole prompt until its first decoding update)."""
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
            row["device_peak_bytes"] = total
            row["cache_bytes_at_peak"] = sum(held.values())
            row["resident_at_peak"] = sorted(resident)
            row["device_bytes_by_layer_kind"] = by_layer_kind
    for step, row in rows.items():
        row["cache_bytes"] = cache_bytes.get(step, 0)
    return [rows[s] for s in sorted(rows)]


def device_peak(trace: Trace) -> int:
    """The most bytes the cache held on the compute device at once, over the whole trace."""
    return max((r["device_peak_bytes"] for r in device_bytes_by_step(trace)), default=0)


def device_bytes_at_last_update(trace: Trace) -> int:
    """The bytes on the device while the last update ran (its layer offloaded since, but its tensors were in use),
    what a live budget check asks after each layer; 0 before any update."""
    now = 0
    for e, held, resident, _ in _device_walk(trace):
        if e["type"] == "update":
            now = sum(held.get(i, 0) for i in resident)
    return now
