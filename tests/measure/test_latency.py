import pytest

from kvlab.measure import latency


def test_cache_and_no_cache_produce_the_same_greedy_tokens(tiny, prompt_ids):
    model = tiny("tiny-llama")
    ids = prompt_ids(7)
    with_cache = latency.time_per_token(model, ids, 6, use_cache=True)
    without = latency.time_per_token(model, ids, 6, use_cache=False)
    assert with_cache.token_ids == without.token_ids
    assert with_cache.positions == without.positions == list(range(7, 13))
    assert len(with_cache.seconds) == 6 and all(s > 0 for s in with_cache.seconds)
    assert with_cache.total_seconds == pytest.approx(sum(with_cache.seconds))


def test_bad_input_is_refused(tiny, prompt_ids):
    model = tiny("tiny-llama")
    with pytest.raises(ValueError, match="shape"):
        latency.time_per_token(model, prompt_ids(4)[0], 3)
    with pytest.raises(ValueError, match="at least 1"):
        latency.time_per_token(model, prompt_ids(4), 0)
