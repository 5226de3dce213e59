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
