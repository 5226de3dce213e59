"""The counting logic of `compile_report`, with the eager backend (inductor takes tens of seconds on a CPU)."""

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


def test_static_generate_matches_with_and_without_compile(tiny, prompt_ids):
    model = tiny("tiny-llama")
    eager, _ = compiled.static_generate(model, prompt_ids(5), 5, 16)
    counted = compiled.CountingBackend(inductor=False)
    compiled_tokens, _ = compiled.static_generate(model, prompt_ids(5), 5, 16, counted)
    assert eager == compiled_tokens and len(eager) == 5 and counted.graphs >= 1
