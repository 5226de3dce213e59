"""kvlab.measure.guide_table: the cache guide's table from measurements."""

import copy

import pytest
import torch

import kvlab
from kvlab.measure.guide_table import (
    Setup,
    _memory_ranks,
    calculated_for,
    compare_with_guide,
    live_runs,
    measure_compile_and_memory,
    measure_offloading,
    measure_sliding,
)
from kvlab.measure.published import GUIDE
from kvlab.size import from_config


def test_memory_ranks_follow_the_bytes():
    assert _memory_ranks([300, 100, 200]) == ["High", "Low", "Medium"]
    assert _memory_ranks([5, 1]) == ["#2", "#1"]


def test_sliding_layers_stay_in_the_window_and_quantized_is_refused(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(12)
    setup = Setup(new_tokens=4)
    dynamic = measure_sliding(model, ids, "dynamic", setup)
    assert dynamic["supported"] and "sliding layers hold 7 slots (window 8), full layers 15" in dynamic["evidence"]
    quantized = measure_sliding(model, ids, "quantized", setup)
    assert not quantized["supported"] and quantized["evidence"].startswith("refused:")


def test_offloading_logs_transfers_for_dynamic_and_static_only(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(4)
    setup = Setup(new_tokens=2)
    assert measure_offloading(model, ids, "dynamic", setup)["supported"]
    assert measure_offloading(model, ids, "static", setup)["supported"]
    assert not measure_offloading(model, ids, "quantized", setup)["supported"]


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
    assert trace.meta["cache"] == kind
    predicted = calculated_for(
        trace, from_config(model.config), prompt_tokens=20, cache_config=kwargs.get("cache_config")
    )
    assert predicted.bytes == trace.summary()["final_bytes"]
    assert predicted.tokens == 20 + 12 - 1
