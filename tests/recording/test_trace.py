import json

import pytest

from kvlab.i18n import set_language
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


@pytest.fixture
def language():
    """set_language for one test, English unless it says otherwise; the default is back afterwards."""
    set_language("en")
    yield set_language
    set_language(None)


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
    with pytest.raises(TraceFormatError, match="reads versions 1, 2, 3, 4, 5 and 6"):
        Trace.load(bad)
    bad.write_text(json.dumps({"kvlab_trace": SCHEMA_VERSION, "events": [{"type": "nope"}]}))
    with pytest.raises(TraceFormatError, match="update"):
        Trace.load(bad)


def test_the_summary_is_a_dict_that_prints_as_a_two_column_table(trace, language):
    s = trace.summary()
    assert isinstance(s, dict) and s["peak_bytes"] == 220 and json.loads(json.dumps(s)) == dict(s)
    lines = str(s).splitlines()
    assert str(s) == repr(s) and [line.split()[0] for line in lines] == list(s)  # one field a line, by its key
    assert {len(line) for line in lines} == {len(lines[0])}  # the values end in one column
    assert lines[list(s).index("peak_bytes")].endswith(" 220 B")
    assert lines[list(s).index("waste_pct")].endswith(" 50.0")
    assert Trace().summary()["tokens_per_s"] is None and str(Trace().summary()).splitlines()[-1].endswith(" -")


def test_the_layer_table_is_a_list_of_dicts_that_prints_aligned_under_its_headers(trace, language):
    table = trace.layer_table()
    assert isinstance(table, list) and table[1]["tokens_evicted"] == 1 and [r["layer_idx"] for r in table] == [0, 1]
    assert table == [dict(row) for row in table] and table[:1] == [table[0]]
    header, *rows = str(table).splitlines()
    assert str(table) == repr(table) and len(rows) == 2
    assert header.split() == table.columns() and "packed_bytes" not in table.columns()  # no quantized layer
    for column in ("layer_idx", "bytes_held", "tokens_evicted"):  # numbers end under the end of their header
        end = header.index(column) + len(column)
        assert all(row[end - 1] != " " and (end == len(row) or row[end] == " ") for row in rows), column
    assert rows[0].split()[:3] == ["self", "0", "full"] and "100 B" in rows[0]  # text left, bytes in words
    assert header.index("layer_kind") == rows[0].index("full")
    assert repr(Trace().layer_table()) == "[]"


def test_a_quantized_layer_brings_its_storage_columns(trace, language):
    quantized = Trace([{**trace.events[0], "quantized_tokens": 16, "packed_bytes": 2048}])
    table = quantized.layer_table()
    assert {"quantized_tokens", "residual_tokens", "packed_bytes", "residual_bytes"} <= set(table.columns())
    assert "2.0 KiB" in str(table)


def test_the_tables_write_numbers_in_the_language_in_use(language):
    events = [_update(0, layer, 1500, 2000, nbytes=3 * 1024 * 1024, cache_bytes=6 * 1024 * 1024) for layer in (0, 1)]
    trace = Trace(events)
    language("pt-BR")
    assert "6,0 MiB" in str(trace.summary()) and " 3.000" in str(trace.summary())  # slots_live 3,000
    assert "3,0 MiB" in str(trace.layer_table()) and "2.000" in str(trace.layer_table())
    language("en")
    assert "6.0 MiB" in str(trace.summary()) and "2,000" in str(trace.layer_table())


def test_is_empty_counts_every_event_kept_and_deferred_without_building_their_dicts():
    import torch

    from kvlab import _compat
    from kvlab.recording.layer_state import read_layer
    from kvlab.recording.recorder import Recorder

    assert Trace().is_empty and not Trace([_update(0, 0, 1)]).is_empty
    layer = _compat.DynamicLayer()
    layer.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # (batch, kv_heads, tokens, head_dim)
    read_layer(layer, "full")  # a plain dynamic layer: its updates may be deferred

    class Cache:  # what `Recorder.defer` reads of a cache
        layers = [layer]
        kvlab_role = "self"
        _kvlab_query_heads = 0

        def _kvlab_layer_kind(self, layer_idx):
            return "full"

    recorder = Recorder()
    assert recorder.trace.is_empty
    recorder.defer(Cache(), 0, 0.25)  # kept, not yet logged
    assert not recorder.trace.is_empty
    assert recorder.trace._unbuilt and not recorder.trace._events  # logged as a tuple, no dict built to answer
    assert [e["layer_idx"] for e in recorder.trace.events] == [0]
