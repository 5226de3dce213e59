from kvlab.bench.compile import compile_summary


def test_compile_time_is_the_first_call_minus_a_call_that_reused_the_graphs():
    runs = [
        {"prompt_tokens": 8, "seconds": 10.0, "graphs_compiled": 1, "token_ids": [5, 6]},
        {"prompt_tokens": 8, "seconds": 1.5, "graphs_compiled": 0, "token_ids": [5, 6]},
        {"prompt_tokens": 4, "seconds": 4.0, "graphs_compiled": 1, "token_ids": [7, 8]},
    ]
    summary = compile_summary(runs)
    assert summary["compile_seconds"] == 8.5
    assert summary["recompiles_per_call"] == [1, 0, 1]
    assert summary["first_call_tokens"] == [5, 6]
    assert all("token_ids" not in call for call in summary["calls"])


def test_without_a_reusing_call_the_whole_first_call_counts():
    runs = [{"prompt_tokens": 8, "seconds": 3.0, "graphs_compiled": 2, "token_ids": []}]
    assert compile_summary(runs)["compile_seconds"] == 3.0
