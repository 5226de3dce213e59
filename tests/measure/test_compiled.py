"""The counting logic of `compile_report` and `compile_runs`, with the eager backend (inductor takes tens of
seconds on a CPU), and the arithmetic of `compile_summary`."""

import pytest
from transformers import DynamicCache, StaticCache

from kvlab.measure import compiled


def test_prompt_length_does_not_recompile_cache_length_does(tiny, prompt_ids):
    model = tiny("tiny-llama")
    report = compiled.compile_report(
        model, [prompt_ids(6), prompt_ids(9, seed=1)], new_tokens=4, max_cache_len=16, inductor=False
    )
    graphs = {r["run"]: r["new_graphs"] for r in report["runs"]}
    assert report["same_tokens"]
    assert graphs["first compiled run"] == report["graphs_first"] >= 1
    assert graphs["same prompt again"] == 0
    assert graphs["prompt of 9 tokens"] == 0  # the prefill runs eagerly
    assert graphs["max_cache_len 32"] >= 1  # the decode graph is specialised to the cache shape
    assert [r["label"] for r in report["runs"]][:3] == ["first compiled run", "same prompt again", "prompt of 9 tokens"]
    steady = report["steady"]  # eager against compiled once the graphs exist: repeated, with an interval
    assert len(steady["a"]["times_s"]) == len(steady["b"]["times_s"]) == 5
    assert steady["low"] <= steady["ratio"] <= steady["high"] and steady["verdict"]
    assert report["steady_graphs"] == 0  # the timed compiled runs replayed the graph of the first cache shape


def test_static_generate_matches_with_and_without_compile(tiny, prompt_ids):
    model = tiny("tiny-llama")
    eager, _ = compiled.static_generate(model, prompt_ids(5), 5, 16)
    counted = compiled.CountingBackend(inductor=False)
    compiled_tokens, _ = compiled.static_generate(model, prompt_ids(5), 5, 16, counted)
    assert eager == compiled_tokens and len(eager) == 5 and counted.graphs >= 1


def test_compile_runs_count_the_graphs_of_each_call(tiny, prompt_ids):
    model = tiny("tiny-llama")
    runs = compiled.compile_runs(model, [prompt_ids(6), prompt_ids(6), prompt_ids(4)], 4, inductor=False)
    assert [r["prompt_tokens"] for r in runs] == [6, 6, 4]
    assert runs[0]["graphs_compiled"] >= 1 and runs[1]["graphs_compiled"] == 0
    assert runs[2]["graphs_compiled"] >= 1  # a shorter prompt, so a shorter cache: the decode graph again
    assert runs[0]["token_ids"] == runs[1]["token_ids"] and len(runs[0]["token_ids"]) == 4


def test_compile_time_is_the_first_call_minus_a_call_that_reused_the_graphs():
    runs = [
        {"prompt_tokens": 8, "seconds": 10.0, "graphs_compiled": 1, "token_ids": [5, 6]},
        {"prompt_tokens": 8, "seconds": 1.5, "graphs_compiled": 0, "token_ids": [5, 6]},
        {"prompt_tokens": 4, "seconds": 4.0, "graphs_compiled": 1, "token_ids": [7, 8]},
    ]
    summary = compiled.compile_summary(runs)
    assert summary["compile_seconds"] == 8.5
    assert summary["recompiles_per_call"] == [1, 0, 1]
    assert summary["first_call_tokens"] == [5, 6]
    assert all("token_ids" not in call for call in summary["calls"])


def test_without_a_reusing_call_the_whole_first_call_counts():
    runs = [{"prompt_tokens": 8, "seconds": 3.0, "graphs_compiled": 2, "token_ids": []}]
    assert compiled.compile_summary(runs)["compile_seconds"] == 3.0


def test_a_dynamic_cache_traces_a_graph_per_decoding_call_a_static_cache_one(tiny, prompt_ids):
    model = tiny("tiny-llama")
    eager_forward = model.forward
    dynamic = compiled.decode_graphs(model, prompt_ids(5), DynamicCache(config=model.config), new_tokens=4)
    static = compiled.decode_graphs(model, prompt_ids(5), StaticCache(config=model.config, max_cache_len=16), 4)
    assert [s["key_slots"] for s in dynamic] == [5, 6, 7]  # the keys grow: a new input shape every call
    assert [s["new_graphs"] for s in dynamic] == [1, 1, 1]
    assert [s["key_slots"] for s in static] == [16, 16, 16]
    assert [s["new_graphs"] for s in static] == [1, 0, 0]  # one shape: traced once, replayed
    assert "forward" not in model.__dict__ and model.forward == eager_forward  # the model is left as it was


def test_decode_graphs_refuses_more_calls_than_dynamo_compiles(tiny, prompt_ids):
    model = tiny("tiny-llama")
    with pytest.raises(ValueError, match="new_tokens"):
        compiled.decode_graphs(model, prompt_ids(5), DynamicCache(config=model.config), new_tokens=40)
