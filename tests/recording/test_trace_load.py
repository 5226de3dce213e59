"""Trace.load refuses what is not a kvlab trace in one line, and whatever it accepts can be summarised.

Before: a binary file raised UnicodeDecodeError, a list as meta raised TypeError, and events missing fields
loaded, then summary() raised KeyError. The property test mutates a real trace at random (fixed seed)."""

from __future__ import annotations

import copy
import json
import random

import pytest

import kvlab
from kvlab import _compat
from kvlab.recording.trace import EVENT_FIELDS, SCHEMA_VERSION, Trace, TraceFormatError
from kvlab.recording.work import WORK_FIELDS


@pytest.fixture(scope="module")
def recorded(prompt_ids_module) -> dict:
    """A real trace with every event type a tiny model produces: updates, a crop, flushes, transfers."""
    model = kvlab.tiny_model("tiny-llama")
    cache = kvlab.make_cache("quantized", model.config, backend="quanto", nbits=4, q_group_size=16, residual_length=3)
    model.generate(
        prompt_ids_module(8), **{_compat.CACHE_KWARG: cache}, max_new_tokens=5, do_sample=False, pad_token_id=0
    )
    cache.crop(-1)
    offloaded = kvlab.make_cache("offloaded", model.config, trace=cache.trace)
    model.generate(
        prompt_ids_module(8), **{_compat.CACHE_KWARG: offloaded}, max_new_tokens=2, do_sample=False, pad_token_id=0
    )
    data = cache.trace.to_dict()
    assert {e["type"] for e in data["events"]} == set(EVENT_FIELDS)
    return json.loads(json.dumps(data, default=str))


@pytest.fixture(scope="module")
def prompt_ids_module():
    import torch

    return lambda n: torch.randint(3, 128, (1, n), generator=torch.Generator().manual_seed(n))


def refused(path) -> str:
    with pytest.raises(TraceFormatError) as err:
        Trace.load(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_the_reported_cases(tmp_path, recorded):
    path = tmp_path / "t.json"
    path.write_bytes(bytes(range(256)) * 4)
    assert "is not text" in refused(path)
    path.write_text(json.dumps({**recorded, "meta": [1, 2]}))
    assert "'meta' must be a JSON object" in refused(path)
    broken = copy.deepcopy(recorded)
    del broken["events"][0]["cache_bytes"]
    path.write_text(json.dumps(broken))
    assert "event 0 (update) lacks cache_bytes; a update event has step, role, layer_idx" in refused(path)
    broken["events"][0] = {**recorded["events"][0], "slots_live": "12"}
    path.write_text(json.dumps(broken))
    assert "event 0 (update) has slots_live='12'; it must be an integer" in refused(path)
    path.write_text(json.dumps(recorded))
    assert Trace.load(path).summary() == Trace.from_dict(recorded).summary()


# A version-1 trace as kvlab 0.1 wrote it (a static cache, 2 layers, max_cache_len 8): the layer's kind was `kind`.
def _v1_update(step, layer, length, cache_bytes, kind="full") -> dict:
    return {
        "type": "update",
        "step": step,
        "layer_idx": layer,
        "role": "self",
        "op": "kv",
        "tokens_added": 4 if step == 0 else 1,
        "tokens_evicted_now": 0,
        "seconds": 0.001,
        "cache_bytes": cache_bytes,
        "kind": kind,
        "logical_length": length,
        "slots_allocated": 8,
        "slots_live": length,
        "slots_masked": 8 - length,
        "tokens_evicted": 0,
        "bytes_held": 256,
        "device": "cpu",
        "quantized_tokens": 0,
        "residual_tokens": 0,
        "packed_bytes": 0,
        "residual_bytes": 0,
    }


VERSION_1 = {
    "kvlab_trace": 1,
    "meta": {"model": "tiny", "cache": "static", "options": {"max_cache_len": 8}, "layer_kinds": ["sliding", "full"]},
    "events": [
        _v1_update(0, 0, 4, 256, "sliding"),
        _v1_update(0, 1, 4, 512),
        _v1_update(1, 0, 5, 512, "sliding"),
        _v1_update(1, 1, 5, 512),
        {
            "type": "crop",
            "step": 1,
            "role": "self",
            "n": -1,
            "past_recording": False,
            "lengths_before": [5, 5],
            "lengths_after": [4, 4],
        },
    ],
}


def test_a_version_1_trace_loads_with_todays_names_and_the_same_summary(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(VERSION_1))
    trace = Trace.load(path)
    assert [row["layer_kind"] for row in trace.layer_table()] == ["sliding", "full"]
    assert all("kind" not in e for e in trace.updates)
    assert trace.meta == {
        "model": "tiny",
        "cache_kind": "static",
        "options": {"max_cache_len": 8},
        "layer_kinds": ["sliding", "full"],
    }
    version_2 = {**VERSION_1, "kvlab_trace": 2, "events": copy.deepcopy(VERSION_1["events"])}
    for event in version_2["events"][:4]:
        event["layer_kind"] = event.pop("kind")
    assert trace.summary() == Trace.from_dict(version_2).summary()
    assert trace.summary() == {
        "steps": 2,
        "peak_bytes": 512,
        "final_bytes": 512,
        "slots_allocated": 16,
        "slots_live": 10,
        "slots_masked": 6,
        "waste_pct": 37.5,
        "tokens_evicted": 0,
        "crops": 1,
        "flushes": 0,
        "transfers": 0,
        "transfer_bytes": 0,
        "tokens_per_s": None,
    }
    saved = json.loads(trace.save(tmp_path / "v6.json").read_text())  # saved again, it is a version-6 trace
    assert saved["kvlab_trace"] == SCHEMA_VERSION == 6 and saved["meta"]["cache_kind"] == "static"
    assert "cache" not in saved["meta"]


def as_version(version: int) -> dict:
    """`VERSION_1` as kvlab wrote it at `version`: `layer_kind` from 2 on, the work counters (null) from 3 on."""
    events = copy.deepcopy(VERSION_1["events"])
    for event in events if version >= 2 else []:
        if "kind" in event:
            event["layer_kind"] = event.pop("kind")
            event.update(dict.fromkeys(WORK_FIELDS) if version >= 3 else {})
    return {**copy.deepcopy(VERSION_1), "kvlab_trace": version, "events": events}


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_older_trace_reports_its_cache_kind_under_todays_name(tmp_path, version):
    """Versions 1-3 wrote the cache kind as meta "cache": it loads as "cache_kind" (the data read is left as it
    was), and every older version of the same trace loads as one trace."""
    path = tmp_path / f"v{version}.json"
    path.write_text(json.dumps(as_version(version)))
    trace = Trace.load(path)
    assert trace.meta["cache_kind"] == VERSION_1["meta"]["cache"] == "static" and "cache" not in trace.meta
    data = as_version(1)
    first = Trace.from_dict(data)
    assert data["meta"]["cache"] == "static" and "cache_kind" not in data["meta"]
    assert (trace.events, trace.meta, trace.summary()) == (first.events, first.meta, first.summary())


def test_an_older_trace_loads_with_its_work_counters_unknown_not_zero(tmp_path):
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(VERSION_1))
    trace = Trace.load(path)
    assert all(e["attention_flops"] is None and e["queries"] is None for e in trace.updates)
    assert [row["attention_flops"] for row in trace.work_by_step()] == [None, None]
    assert trace.input_signatures() == []
    reloaded = Trace.load(trace.save(tmp_path / "v5.json"))  # null stays null through a save
    assert reloaded.events == trace.events


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_a_crop_from_before_version_5_has_its_restored_states_unknown_not_zero(tmp_path, version):
    """Schema 5 added `recurrent_states_restored` to crops; an older crop never counted them, so they load as null."""
    path = tmp_path / "old.json"
    path.write_text(json.dumps(as_version(version)))
    (crop,) = Trace.load(path).crops
    assert crop["recurrent_states_restored"] is None and crop["lengths_after"] == [4, 4]


def test_a_version_5_crop_without_its_restored_states_is_refused_by_name(tmp_path):
    data = as_version(4)
    data["kvlab_trace"] = 5
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert "(crop) lacks recurrent_states_restored" in refused(path)


def test_a_version_6_trace_round_trips(tmp_path, recorded):
    assert recorded["kvlab_trace"] == 6 and all("layer_kind" in e for e in recorded["events"] if e["type"] == "update")
    trace = Trace.from_dict(recorded)
    loaded = Trace.load(trace.save(tmp_path / "t.json"))
    assert (loaded.events, loaded.meta) == (trace.events, trace.meta) and loaded.to_dict() == recorded


@pytest.mark.parametrize("version", [0, 7, "2", 2.0, None])
def test_an_unknown_version_names_the_versions_this_kvlab_reads(tmp_path, version):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({**VERSION_1, "kvlab_trace": version}))
    assert f"has trace schema version {version!r}; this kvlab reads versions 1, 2, 3, 4, 5 and 6." in refused(path)


JUNK = [None, True, -1, 2.5, "x", "", [], [1], {}, {"a": 1}, 10**30]


def mutate(data: dict, rng: random.Random) -> dict | list | str:
    data = copy.deepcopy(data)
    choice = rng.randrange(9)
    events = data["events"]
    event = rng.choice(events)
    if choice == 0:  # drop a field
        del event[rng.choice(sorted(event))]
    elif choice == 1:  # a field of the wrong JSON type
        event[rng.choice(sorted(event))] = rng.choice(JUNK)
    elif choice == 2:
        event["type"] = rng.choice(JUNK + ["update", "crop", "flush", "transfer"])
    elif choice == 3:
        data["meta"] = rng.choice(JUNK)
    elif choice == 4:
        data["events"] = rng.choice(JUNK + [events[0]])
    elif choice == 5:
        data["kvlab_trace"] = rng.choice(JUNK + [1])
    elif choice == 6:
        events.insert(rng.randrange(len(events) + 1), rng.choice(JUNK))
    elif choice == 7:
        return rng.choice(JUNK)
    else:  # a valid but odd trace: reordered, duplicated, truncated events
        rng.shuffle(events)
        data["events"] = events[: rng.randrange(len(events) + 1)] * rng.randrange(1, 3)
    return data


def test_malformed_traces_fail_at_load_with_one_line_or_summarise(tmp_path, recorded):
    rng = random.Random(9)
    path = tmp_path / "t.json"
    outcomes = {"refused": 0, "loaded": 0}
    for case in range(300):
        mutated = mutate(recorded, rng)
        if case % 3 == 0:  # as text, sometimes cut short or with bytes that are not UTF-8
            text = json.dumps(mutated).encode()
            text = text[: rng.randrange(len(text) + 1)] if case % 2 else text + bytes([0xFF, 0xFE])
            path.write_bytes(text)
        else:
            path.write_text(json.dumps(mutated))
        try:
            trace = Trace.load(path)
        except TraceFormatError as err:
            assert "\n" not in str(err) and str(err).startswith(str(path)), err
            outcomes["refused"] += 1
            continue
        outcomes["loaded"] += 1
        trace.summary(), trace.layer_table(), trace.bytes_by_step(), trace.slots_by_step(), trace.occupancy()
        repr(trace)
    assert outcomes["refused"] > 150 and outcomes["loaded"] > 20  # both branches were exercised


def test_an_update_read_after_its_forward_has_null_seconds_and_loads(tmp_path, recorded):
    """Version 6: a watched DynamicCache's updates are read after the forward, their own seconds unknown (null)."""
    data = copy.deepcopy(recorded)
    update = next(e for e in data["events"] if e["type"] == "update")
    update["seconds"] = None
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert Trace.load(path).updates[0]["seconds"] is None
    update["seconds"] = "0.1"
    path.write_text(json.dumps(data))
    assert "seconds='0.1'; it must be a number, or null where kvlab read the layer after its forward" in refused(path)
