"""What a paged trace says, forward by forward and over the run: blocks, fragmentation, queueing, preemptions.
The fields are those `kvlab.caches.paged` records; a trace loaded from JSON gives the same rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.cache_kinds import PAGED
from kvlab.recording.slots import waste_pct

if TYPE_CHECKING:
    from kvlab.recording.trace import Trace

# what a row copies from its forward's update event, in this order
_FORWARD_FIELDS = (
    "requests blocks_in_use blocks_free blocks_cached slots_allocated slots_live slots_masked block_tables "
    "cached_block_ids request_tokens scheduled admitted refused new_blocks prefix_hits"
).split()


def is_paged_trace(trace: Trace) -> bool:
    """A trace recorded from transformers' paged cache: it carries the pool's geometry, which everything here reads."""
    return trace.meta.get("cache_kind") == PAGED and isinstance(trace.meta.get("paged"), dict)


def paged_steps(trace: Trace) -> list[dict]:
    """One row per forward of a paged trace: blocks and slots after the forward, and the step's scheduling events.
    Releases between two forwards (finished, preempted) go on the row of the forward before them; `*_after_free`
    give the state after them."""
    rows: dict[int, dict] = {}
    for e in trace.updates:
        step = e["step"]
        if e["op"] == "kv" and "block_tables" in e:
            rows[step] = {
                "step": step,
                **{key: e[key] for key in _FORWARD_FIELDS},
                "finished": [],
                "preempted": [],
                "blocks_to_pool": 0,
                "blocks_kept_cached": 0,
                "blocks_in_use_after_free": e["blocks_in_use"],
                "blocks_free_after_free": e["blocks_free"],
            }
        elif e["op"] == "free" and step in rows:
            row = rows[step]
            if "request_id" in e:
                row["finished" if e["reason"] == "finished" else "preempted"].append(e["request_id"])
                row["blocks_to_pool"] += e["blocks_to_pool"]
                row["blocks_kept_cached"] += e["blocks_kept_cached"]
            row["blocks_in_use_after_free"] = e["blocks_in_use"]
            row["blocks_free_after_free"] = e["blocks_free"]
    return [rows[s] for s in sorted(rows)]


def paged_summary(trace: Trace) -> dict:
    """Blocks over the whole run: peaks, internal fragmentation (time-averaged and at the peak), queueing."""
    rows = paged_steps(trace)
    meta = trace.meta.get("paged", {})
    allocated = sum(r["slots_allocated"] for r in rows)
    masked = sum(r["slots_masked"] for r in rows)
    peak = max(rows, key=lambda r: r["blocks_in_use"], default=None)
    return {
        "forwards": len(rows),
        "page_size": meta.get("page_size"),
        "num_blocks": meta.get("num_blocks"),
        "storage_bytes": meta.get("storage_bytes"),
        "peak_blocks_in_use": peak["blocks_in_use"] if peak else 0,
        "peak_requests": max((r["requests"] for r in rows), default=0),
        "fragmentation_pct_mean": waste_pct(masked, allocated),
        "fragmentation_pct_at_peak": waste_pct(peak["slots_masked"], peak["slots_allocated"]) if peak else 0.0,
        "refusals": sum(len(r["refused"]) for r in rows),
        "requests_refused": len({rid for r in rows for rid in r["refused"]}),
        "preemptions": sum(len(r["preempted"]) for r in rows),
        "finished": sum(len(r["finished"]) for r in rows),
        "prefix_hit_tokens": sum(sum(r["prefix_hits"].values()) for r in rows),
    }


def paged_row_fields(trace: Trace) -> dict:
    """A paged run's fields of a summary row: its `waste_pct` is fragmentation averaged over forwards (the run ends
    with every block back in the pool, so the slots held then are 0)."""
    s = paged_summary(trace)
    return {
        "waste_pct": s["fragmentation_pct_mean"],
        "blocks_peak": s["peak_blocks_in_use"],
        "num_blocks": s["num_blocks"],
        "requests_waited": s["requests_refused"],
        "preemptions": s["preemptions"],
        "requests_finished": s["finished"],
    }
