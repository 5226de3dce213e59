import pytest

import kvlab
from kvlab import _compat
from kvlab.measure.decode_step import time_decode_step


def test_the_same_step_against_each_cache_with_its_attention_work(tiny, prompt_ids):
    model = tiny("tiny-llama")  # 3 layers, 4 query heads, head_dim 16
    caches = {
        "dynamic": _compat.DynamicCache(config=model.config),
        "static 64": _compat.StaticCache(config=model.config, max_cache_len=64),
    }
    with kvlab.watch(model):
        steps = time_decode_step(model, prompt_ids(6), caches, repeats=3)
    assert [len(s.timing.times) for s in steps.values()] == [3, 3]
    assert steps["dynamic"].slots_attended == 3 * 7  # the 6 held tokens and the step's own
    assert steps["static 64"].slots_attended == 3 * 64  # every allocated slot, masked ones included
    assert steps["static 64"].attention_flops == 3 * 2 * 4 * 1 * 64 * 32
    # rolled back after every repeat: each cache holds the prompt again
    assert all(int(cache.get_seq_length()) == 6 for cache in caches.values())


def test_unwatched_caches_have_times_but_no_counters(tiny, prompt_ids):
    model = tiny("tiny-llama")
    steps = time_decode_step(model, prompt_ids(4), {"dynamic": _compat.DynamicCache(config=model.config)}, repeats=2)
    assert steps["dynamic"].slots_attended is None and len(steps["dynamic"].timing.times) == 2


def test_a_batch_is_refused(tiny, prompt_ids):
    with pytest.raises(ValueError, match="shape"):
        time_decode_step(tiny("tiny-llama"), prompt_ids(4, batch=2), {}, repeats=1)
