"""kvlab.measure.paged: a paged trace's rows per forward and its summary, read from the events alone (no model).

The trace below is written by hand in the paged cache's schema (`kvlab.caches.paged`): two layers, blocks of 4,
a pool of 6 blocks. Forward 0 admits r0 (6 tokens) and refuses r1; forward 1 gives r0 a token and admits r1,
which reuses r0's complete first block; then r0 finishes (one block kept cached, one shared) and r1 is preempted.
The recorded traces themselves are checked against transformers in tests/caches/test_paged.py.
"""

from __future__ import annotations

from kvlab.measure.paged import paged_row_fields, paged_steps, paged_summary
from kvlab.recording.trace import Trace

PAGE = 4


def _kv(step: int, layer: int, in_use: int, free: int, cached: int, live: int, first: dict | None = None) -> dict:
    event = {
        "type": "update",
        "step": step,
        "layer_idx": layer,
        "op": "kv",
        "requests": 1 if first is None else len(first["block_tables"]),
        "blocks_in_use": in_use,
        "blocks_free": free,
        "blocks_cached": cached,
        "slots_allocated": in_use * PAGE,
        "slots_live": live,
        "slots_masked": in_use * PAGE - live,
    }
    return {**event, **(first or {})}


def _free(step: int, layer: int, in_use: int, free: int, release: dict | None = None) -> dict:
    event = {"type": "update", "step": step, "layer_idx": layer, "op": "free", "blocks_in_use": in_use}
    return {**event, "blocks_free": free, **(release or {})}


def _step(tables, tokens, scheduled, admitted, refused=None, new_blocks=None, prefix_hits=None) -> dict:
    return {
        "block_tables": tables,
        "cached_block_ids": [],
        "request_tokens": tokens,
        "scheduled": scheduled,
        "admitted": admitted,
        "refused": refused or {},
        "new_blocks": new_blocks or {},
        "prefix_hits": prefix_hits or {},
    }


def _release(rid: str, reason: str, to_pool: int, kept: int) -> dict:
    return {"request_id": rid, "reason": reason, "blocks_to_pool": to_pool, "blocks_kept_cached": kept}


TRACE = Trace(
    [
        _kv(0, 0, 2, 4, 0, 6, _step({"r0": [2, 3]}, {"r0": 6}, {"r0": 6}, ["r0"], {"r1": 9}, {"r0": 2})),
        _kv(0, 1, 2, 4, 0, 6),
        _kv(
            1,
            0,
            4,
            2,
            0,
            7 + 5,  # r1 shares r0's first block: its 4 slots count once
            _step(
                {"r0": [2, 3], "r1": [2, 4, 5]},
                {"r0": 7, "r1": 9},
                {"r0": 1, "r1": 5},
                ["r1"],
                new_blocks={"r1": 2},
                prefix_hits={"r1": 4},
            ),
        ),
        _kv(1, 1, 4, 2, 0, 12),
        _free(1, 0, 3, 2, _release("r0", "finished", 0, 1)),
        _free(1, 1, 3, 2),
        _free(1, 0, 0, 5, _release("r1", "preempted", 3, 0)),
        _free(1, 1, 0, 5),
        {"type": "crop", "step": 1},  # not an update: never read
    ],
    {"cache_kind": "paged", "paged": {"page_size": PAGE, "num_blocks": 6, "storage_bytes": 1536}},
)


def test_one_row_per_forward_with_the_releases_after_it():
    first, second = paged_steps(TRACE)
    assert (first["step"], first["requests"], first["blocks_in_use"], first["slots_masked"]) == (0, 1, 2, 2)
    assert first["refused"] == {"r1": 9} and first["admitted"] == ["r0"] and first["finished"] == []
    assert (first["blocks_in_use_after_free"], first["blocks_free_after_free"]) == (2, 4)  # nothing released
    assert second["block_tables"] == {"r0": [2, 3], "r1": [2, 4, 5]} and second["prefix_hits"] == {"r1": 4}
    assert (second["finished"], second["preempted"]) == (["r0"], ["r1"])
    assert (second["blocks_to_pool"], second["blocks_kept_cached"]) == (3, 1)
    assert (second["blocks_in_use_after_free"], second["blocks_free_after_free"]) == (0, 5)


def test_the_summary_counts_peaks_fragmentation_and_queueing():
    assert paged_summary(TRACE) == {
        "forwards": 2,
        "page_size": PAGE,
        "num_blocks": 6,
        "storage_bytes": 1536,
        "peak_blocks_in_use": 4,
        "peak_requests": 2,
        "fragmentation_pct_mean": 25.0,  # (2 + 4) empty of (8 + 16) handed-out slots
        "fragmentation_pct_at_peak": 25.0,  # 4 of 16
        "refusals": 1,
        "requests_refused": 1,
        "preemptions": 1,
        "finished": 1,
        "prefix_hit_tokens": 4,
    }


def test_the_summary_row_fields_and_an_empty_trace():
    assert paged_row_fields(TRACE) == {
        "waste_pct": 25.0,
        "blocks_peak": 4,
        "num_blocks": 6,
        "requests_waited": 1,
        "preemptions": 1,
        "requests_finished": 1,
    }
    empty = paged_summary(Trace())
    assert (empty["forwards"], empty["peak_blocks_in_use"], empty["fragmentation_pct_mean"]) == (0, 0, 0.0)
    assert empty["page_size"] is None
