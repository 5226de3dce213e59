"""kvlab.measure.guide_table: the cache guide's table from measurements."""

import copy

import pytest
import torch

import kvlab
from kvlab.measure.guide_table import (
    MEASURED,
    NOT_DISTINGUISHABLE,
    NOT_MEASURED,
    REFERENCE_CELL,
    SIGNATURE,
    STAND_IN,
    Setup,
    _row,
    calculated_for,
    compare_with_guide,
    live_runs,
    measure_compile_and_memory,
    measure_offloading,
    measure_sliding,
    memory_word,
    speed_cells,
    speed_word,
    tally,
    tally_by_basis,
    time_decoding,
    with_speed,
)
from kvlab.measure.published import GUIDE
from kvlab.measure.timing import Timing, compare
from kvlab.model_facts import model_facts
from kvlab.size import from_config


def test_the_memory_word_is_a_rule_on_the_ratio_not_a_ranking():
    assert [memory_word(r) for r in (0.3, 0.89, 0.9, 1.0, 1.1, 1.11, 2.2)] == [
        "Low",
        "Low",
        "Medium",
        "Medium",
        "Medium",
        "High",
        "High",
    ]
    # three caches that all hold the same bytes are all "Medium": no forced spread over Low/Medium/High
    assert {memory_word(p / 100) for p in (100, 100, 100)} == {"Medium"}


def _synthetic(kind: str, peak: int, reference_peak: int) -> dict:
    """The facts `measure` gathers for one cache kind, made up: what `_row` turns into cells."""
    return {
        "cache_kind": kind,
        "sliding": {"supported": kind != "quantized", "evidence": "e", "basis": MEASURED},
        "offloading": {
            "supported": kind != "quantized",
            "evidence": "e",
            "devices": ["cpu->cpu"],
            "basis": SIGNATURE if kind == "quantized" else STAND_IN,
        },
        "decode_steps": 7,
        "decode_signatures": 1 if kind == "static" else 7,
        "peak_bytes": peak,
        "live": None,
    }


def _rows(peaks: dict) -> list[dict]:
    return [_row(_synthetic(kind, peak, peaks["dynamic"]), peak / peaks["dynamic"]) for kind, peak in peaks.items()]


def test_rows_carry_a_memory_ratio_a_reference_cell_and_no_compile_measurement():
    rows = {r["cache_kind"]: r for r in _rows({"dynamic": 1000, "static": 2180, "quantized": 300})}
    assert [rows[k]["memory"] for k in ("dynamic", "static", "quantized")] == [REFERENCE_CELL, "High", "Low"]
    assert (rows["static"]["memory ratio"], rows["quantized"]["memory ratio"]) == (2.18, 0.3)
    assert {r["torch.compile"] for r in rows.values()} == {NOT_MEASURED}
    assert rows["static"]["compile evidence"].startswith("1 distinct forward signature over 7 decoding steps")
    assert rows["dynamic"]["compile evidence"].startswith("7 distinct forward signatures over 7 decoding steps")


def test_the_table_columns_are_judged_by_the_rules_and_counted():
    # a static cache sized exactly (ratio 1.0) is "Medium": the guide's "High" is then a disagreement
    verdicts = compare_with_guide(_rows({"dynamic": 1000, "static": 1000, "quantized": 300}))
    cells = {(v["cache"], v["property"]): v["agrees"] for v in verdicts}
    assert cells[("Static Cache", "memory")] is False
    assert cells[("Quantized Cache", "memory")] is True
    assert cells[("Dynamic Cache", "memory")] is None  # the reference of the ratio
    assert {cells[(g["cache"], "torch.compile")] for g in GUIDE.values()} == {None}  # not measured here
    assert tally(verdicts) == {"agree": 7, "differ": 1, "judged": 8, "not judged": 4, "cells": 12}
    # like with like: sliding and memory from runs of transformers' classes, offloading from the stand-in or a signature
    by_basis = tally_by_basis(verdicts)
    assert list(by_basis) == [MEASURED, STAND_IN, SIGNATURE]
    assert {b: (t["agree"], t["judged"]) for b, t in by_basis.items()} == {
        MEASURED: (4, 5),
        STAND_IN: (2, 2),
        SIGNATURE: (1, 1),
    }
    assert by_basis[MEASURED]["properties"] == ["sliding layers", "memory"]


def _timing(label: str, seconds: float, repeats: int = 5) -> Timing:
    return Timing(label, [seconds] * repeats)


def test_the_speed_word_needs_a_verdict_beyond_noise():
    dynamic = _timing("dynamic", 0.10)
    assert speed_word(compare(dynamic, _timing("quantized", 0.20), warn=False)) == "slower"
    assert speed_word(compare(dynamic, _timing("static", 0.05), warn=False)) == "faster"
    assert speed_word(compare(dynamic, _timing("static", 0.10), warn=False)) == NOT_DISTINGUISHABLE  # ratio 1
    noisy = Timing("quantized", [0.05, 0.30, 0.10, 0.02, 0.40])  # an interval far wider than TOO_WIDE
    assert speed_word(compare(dynamic, noisy, warn=False)) == NOT_DISTINGUISHABLE
    two_runs = compare(_timing("dynamic", 0.1, 2), _timing("quantized", 0.2, 2), warn=False)
    assert speed_word(two_runs) == NOT_DISTINGUISHABLE  # fewer than 3 repeats: too noisy to tell


def test_speed_cells_are_ratios_to_the_dynamic_cache_with_their_interval():
    cells = speed_cells({"dynamic": _timing("dynamic", 0.1), "quantized": _timing("quantized", 0.2)})
    assert cells["dynamic"]["speed"] == REFERENCE_CELL
    q = cells["quantized"]
    assert (q["speed"], q["ratio"], q["low"], q["high"]) == ("slower", 2.0, 2.0, 2.0)
    assert q["verdict"] == "quantized is 2.00x slower than dynamic (2.00-2.00)"
    with pytest.raises(ValueError, match="reference"):
        speed_cells({"quantized": _timing("quantized", 0.2)})


def test_speed_is_judged_only_where_the_guide_claims_and_the_verdict_is_beyond_noise():
    rows = _rows({"dynamic": 1000, "static": 2180, "quantized": 300})
    timings = {"dynamic": _timing("dynamic", 0.1), "static": _timing("static", 0.05), "quantized": None}

    def speed(quantized_seconds):
        timings["quantized"] = _timing("quantized", quantized_seconds)
        verdicts = compare_with_guide(with_speed(rows, timings))
        return {v["cache"]: (v["measured"], v["agrees"]) for v in verdicts if v["property"] == "speed"}

    # the guide: quantized "can harm latency" (slower); no claim about eager static decoding
    assert speed(0.2) == {
        "Dynamic Cache": (REFERENCE_CELL, None),
        "Static Cache": ("faster", None),
        "Quantized Cache": ("slower", True),
    }
    assert speed(0.05)["Quantized Cache"] == ("faster", False)
    assert speed(0.1)["Quantized Cache"] == (NOT_DISTINGUISHABLE, None)
    verdicts = compare_with_guide(with_speed(rows, timings))
    assert tally(verdicts) == {"agree": 8, "differ": 0, "judged": 8, "not judged": 7, "cells": 15}
    assert with_speed(rows, timings)[2]["speed interval"] == (1.0, 1.0)


def test_decoding_is_timed_for_each_call_interleaved(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    calls = {"dynamic": {}, "static": {"cache_implementation": "static"}}
    timings = time_decoding(model, ids, calls, new_tokens=4, repeats=2, warmup=0)
    assert list(timings) == ["dynamic", "static"]
    assert all(len(t.times) == 2 and min(t.times) > 0 for t in timings.values())
    with pytest.raises(ValueError, match="at least 2"):
        time_decoding(model, ids, calls, new_tokens=1)


def test_sliding_layers_stay_in_the_window_and_quantized_is_refused(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(12)
    setup = Setup(new_tokens=4)
    dynamic = measure_sliding(model, ids, "dynamic", setup)
    # 12 + 4 - 1 = 15 tokens held (the last new token is never fed back): the full layers hold all of them
    assert dynamic["supported"] and dynamic["evidence"].startswith(
        "15 tokens held: sliding layers hold 7 slots (window 8)"
    )
    assert dynamic["evidence"].endswith("full layers 15")
    assert dynamic["basis"] == MEASURED
    quantized = measure_sliding(model, ids, "quantized", setup)
    # transformers' own QuantizedCache refuses the config too, so the refusal is evidence from the real class
    assert not quantized["supported"] and quantized["evidence"].startswith("refused by kvlab's check and by ")
    assert quantized["basis"] == MEASURED


def test_offloading_logs_transfers_for_dynamic_and_static_only(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(4)
    setup = Setup(new_tokens=2)
    dynamic = measure_offloading(model, ids, "dynamic", setup)
    assert dynamic["supported"] and measure_offloading(model, ids, "static", setup)["supported"]
    quantized = measure_offloading(model, ids, "quantized", setup)
    assert not quantized["supported"] and quantized["basis"] == SIGNATURE
    # notebook 03's count: prefill offloads every layer and prefetches layer 0; each decode step moves each layer twice
    layers = model.config.num_hidden_layers
    assert dynamic["moves"] == (layers + 1) + (setup.new_tokens - 1) * 2 * layers
    if next(model.parameters()).device.type == "cpu":  # no accelerator: the moves say so, and it is a stand-in
        assert dynamic["devices"] == ["cpu->cpu"] and dynamic["moved"] == 0
        assert "stayed on the CPU here" in dynamic["evidence"] and dynamic["basis"] == STAND_IN


def test_offloading_counts_only_the_moves_that_change_where_a_layer_lives(tiny, prompt_ids):
    # offloaded_static keeps sliding layers on the device: only the full layers move, the no-op prefetches don't count
    model, ids = tiny("tiny-gemma3"), prompt_ids(4)
    setup = Setup(new_tokens=3)
    static = measure_offloading(model, ids, "static", setup)
    kinds = model_facts(model.config).layer_kinds
    full = kinds.count("full")
    assert 0 < full < len(kinds)
    assert static["moves"] == (full + 1) + (setup.new_tokens - 1) * 2 * full


def test_static_cache_has_one_decoding_signature_and_reserves_more_bytes(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    setup = Setup(new_tokens=5, static_room=16)
    dynamic = measure_compile_and_memory(model, None, ids, "dynamic", setup)
    static = measure_compile_and_memory(model, None, ids, "static", setup)
    assert (dynamic["decode_steps"], dynamic["decode_signatures"]) == (4, 4)
    assert (static["decode_steps"], static["decode_signatures"]) == (4, 1)
    assert static["peak_bytes"] > dynamic["peak_bytes"]
    # what the live cache held, in the terms of kvlab.size: the last new token is never fed back
    assert dynamic["live"]["tokens"] == 6 + 5 - 1 and dynamic["live"]["prefill"] == 6
    assert static["live"]["options"] == {"max_cache_len": 6 + 5 + 16}


def test_live_runs_lists_every_cache_behind_the_table():
    live = {"cache_kind": "dynamic", "options": {}, "prefill": 4, "tokens": 7, "final_bytes": 10, "peak_bytes": 12}
    rows = [
        {"cache": "Dynamic Cache", "live": {"sliding model": live, "full model": {**live, "final_bytes": 11}}},
        {"cache": "Quantized Cache", "live": {"sliding model": None, "full model": live}},
    ]
    assert [(r["cache"], r["model"], r["final_bytes"]) for r in live_runs(rows)] == [
        ("Dynamic Cache", "sliding model", 10),
        ("Dynamic Cache", "full model", 11),
        ("Quantized Cache", "full model", 10),
    ]


def test_compare_with_guide_flags_each_disagreement():
    row = {**GUIDE["dynamic"], "torch.compile": "Yes"}
    verdicts = {c["property"]: c["agrees"] for c in compare_with_guide([row])}
    assert verdicts == {"sliding layers": True, "offloading": True, "torch.compile": False, "memory": True}
    row = {**GUIDE["static"], "torch.compile": NOT_MEASURED}
    verdicts = {c["property"]: (c["agrees"], c["why"]) for c in compare_with_guide([row])}
    assert verdicts["torch.compile"] == (None, "not measured here")


GUIDE_CALLS = {  # the guide's keywords for each of its table's caches
    "dynamic": {},
    "static": {"cache_implementation": "static"},
    "quantized": {
        "cache_implementation": "quantized",
        "cache_config": {"backend": "quanto", "nbits": 4, "residual_length": 8, "q_group_size": 32},
    },
}


@pytest.mark.parametrize("kind", ["dynamic", "static", "quantized"])
def test_the_calculator_matches_a_watched_generate_of_each_guide_call(tiny, prompt_ids, kind):
    model, ids = tiny("tiny-llama"), prompt_ids(20)
    kwargs = copy.deepcopy(GUIDE_CALLS[kind])
    if kind == "quantized":
        kwargs["cache_config"]["q_group_size"] = 16  # the tiny model's head_dim
    with kvlab.watch(model) as watch:
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12, **kwargs)
    trace = watch.trace
    assert trace.meta["cache_kind"] == kind
    predicted = calculated_for(
        trace, from_config(model.config), prompt_tokens=20, cache_config=kwargs.get("cache_config")
    )
    assert predicted.bytes == trace.summary()["final_bytes"]
    assert predicted.tokens == 20 + 12 - 1
