import json

import pytest

from kvlab.recording.trace import SCHEMA_VERSION, Trace, TraceFormatError
from kvlab.recording.work import no_work


def _update(step, layer, live, allocated=None, nbytes=100, cache_bytes=0, evicted=0, role="self"):
    allocated = live if allocated is None else allocated
    return {
        "type": "update",
        "step": step,
        "layer_idx": layer,
        "role": role,
        "op": "kv",
        "layer_kind": "full",
        "tokens_added": 1,
        "tokens_evicted_now": evicted,
        "seconds": 0.0,
        "cache_bytes": cache_bytes,
        "logical_length": live,
        "slots_allocated": allocated,
        "slots_live": live,
        "slots_masked": allocated - live,
        "tokens_evicted": evicted,
        "bytes_held": nbytes,
        "device": "cpu",
        "quantized_tokens": 0,
        "residual_tokens": 0,
        "packed_bytes": 0,
        "residual_bytes": 0,
        **no_work(1),
    }


@pytest.fixture
def trace():
    return Trace(
        [
            _update(0, 0, 4, 10, cache_bytes=100),
            _update(0, 1, 4, 10, cache_bytes=200),
            _update(1, 0, 5, 10, cache_bytes=210),
            _update(1, 1, 5, 10, cache_bytes=220, evicted=1),
        ],
        {"tokens_per_s": 3.0},
    )


def test_summary_reads_the_final_state(trace):
    s = trace.summary()
    assert (s["steps"], s["peak_bytes"], s["final_bytes"]) == (2, 220, 220)
    assert (s["slots_allocated"], s["slots_live"], s["slots_masked"]) == (20, 10, 10)
    assert s["waste_pct"] == 50.0 and s["tokens_evicted"] == 1 and s["tokens_per_s"] == 3.0


def test_views_by_step_and_layer(trace):
    assert trace.bytes_by_step() == [200, 220]
    assert trace.slots_by_step() == [
        {"step": 0, "slots_allocated": 20, "slots_live": 8, "slots_masked": 12},
        {"step": 1, "slots_allocated": 20, "slots_live": 10, "slots_masked": 10},
    ]
    assert trace.occupancy() == [[4, 5], [4, 5]]
    assert [row["tokens_evicted"] for row in trace.layer_table()] == [0, 1]


def test_round_trip(tmp_path, trace):
    path = trace.save(tmp_path / "t.json")
    loaded = Trace.load(path)
    assert loaded.events == trace.events and loaded.meta == trace.meta
    assert loaded.to_pandas().shape == (4, len(trace.events[0]))


def test_a_file_that_does_not_parse_gets_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceFormatError, match="does not parse as JSON"):
        Trace.load(bad)
    bad.write_text(json.dumps({"events": []}))
    with pytest.raises(TraceFormatError, match="not a kvlab trace"):
        Trace.load(bad)
    bad.write_text(json.dumps({"kvlab_trace": SCHEMA_VERSION + 1, "events": []}))
    with pytest.raises(TraceFormatError, match="reads versions 1, 2 and 3"):
        Trace.load(bad)
    bad.write_text(json.dumps({"kvlab_trace": SCHEMA_VERSION, "events": [{"type": "nope"}]}))
    with pytest.raises(TraceFormatError, match="update"):
        Trace.load(bad)
