import pytest

from kvlab.measure import latency


def test_cache_and_no_cache_produce_the_same_greedy_tokens(tiny, prompt_ids):
    model = tiny("tiny-llama")
    ids = prompt_ids(7)
    runs = latency.token_times(model, ids, 6, repeats=1, modes={"cache": True, "no cache": False})
    with_cache, without = runs["cache"], runs["no cache"]
    assert with_cache.token_ids == without.token_ids
    assert with_cache.positions == without.positions == list(range(7, 13))
    assert len(with_cache.seconds) == 6 and all(s > 0 for s in with_cache.seconds)


def test_the_work_per_token_grows_without_a_cache_and_stays_flat_with_one(tiny, prompt_ids):
    runs = latency.token_times(tiny("tiny-llama"), prompt_ids(5), 4, repeats=2)
    without, cached = runs["no cache"], runs["DynamicCache"]
    assert without.tokens_run == [5, 6, 7, 8] and cached.tokens_run == [5, 1, 1, 1]
    assert without.pairs_scored == [25, 36, 49, 64] and cached.pairs_scored == [25, 6, 7, 8]
    assert without.repeats == cached.repeats == 2
    assert all(q1 <= m <= q3 for q1, m, q3 in zip(cached.q1, cached.seconds, cached.q3))
    assert len(cached.runs) == 2 and cached.timing_at(3).times == [run[3] for run in cached.runs]


def test_bad_input_is_refused(tiny, prompt_ids):
    model = tiny("tiny-llama")
    with pytest.raises(ValueError, match="shape"):
        latency.token_times(model, prompt_ids(4)[0], 3)
    with pytest.raises(ValueError, match="at least 1"):
        latency.token_times(model, prompt_ids(4), 0)
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        latency.token_times(model, prompt_ids(4), 2, repeats=0)


def test_timing_over_pools_the_tokens_of_every_repeat():
    from kvlab.measure.latency import TokenTimes

    run = TokenTimes([5, 6, 7], [0.1, 0.2, 0.3], [1, 2, 3], use_cache=True, runs=[[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    assert run.timing_over(range(1, 3), label="late").times == [0.2, 0.3, 0.5, 0.6]


def test_prompt_growth_compares_the_longest_prompt_with_the_shortest_per_label():
    from kvlab.measure.timing import Timing

    steps = {
        "no cache": {16: Timing("a", [0.10, 0.11, 0.10, 0.12]), 128: Timing("b", [0.30, 0.31, 0.32, 0.30]),
                     64: Timing("c", [0.2] * 4)},
        "one length": {16: Timing("d", [0.1] * 4)},
    }  # fmt: skip
    (line,) = latency.prompt_growth(steps)
    assert line.startswith("no cache: 128-token prompt is ") and "slower than 16-token prompt" in line
