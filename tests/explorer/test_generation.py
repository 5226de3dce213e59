from __future__ import annotations

import threading

import pytest

import kvlab
from kvlab.explorer.generation import generate_traced
from kvlab.explorer.models import ByteTokenizer


@pytest.mark.parametrize(
    ("cache", "options"),
    [("dynamic", {}), ("static", {"max_cache_len": 40}), ("offloaded", {"offload_only_non_sliding": False})],
)
def test_same_tokens_and_trace_as_kvlab_run(tiny, prompt_ids, cache, options):
    model, ids = tiny("tiny-gemma3"), prompt_ids(12)
    seen = []
    ours = generate_traced(model, ByteTokenizer(), ids, cache, options, 8, on_token=lambda new: seen.append(len(new)))
    direct = kvlab.run(model, ByteTokenizer(), ids, cache=cache, max_new_tokens=8, **options)
    assert ours.generated_token_ids == direct.generated_token_ids
    assert {k: v for k, v in ours.trace.summary().items() if k != "tokens_per_s"} == {
        k: v for k, v in direct.trace.summary().items() if k != "tokens_per_s"
    }
    assert seen == list(range(1, 9))  # one report per generated token, the prompt is not reported


def test_the_stop_switch_ends_generation_after_the_step_in_progress(tiny, prompt_ids):
    # generate checks its stopping criteria before it streams a token, so a Stop pressed while token 3 is
    # being reported lets the step already started (token 4) finish, then ends cleanly.
    stop = threading.Event()

    def on_token(new_ids):
        if len(new_ids) == 3:
            stop.set()

    result = generate_traced(
        tiny("tiny-llama"), ByteTokenizer(), prompt_ids(6), "dynamic", {}, 20, on_token=on_token, stop=stop
    )
    assert len(result.generated_token_ids) == 4
    assert result.trace.meta["stopped"] is True
    assert result.trace.summary()["steps"] == 4
    assert result.trace.final_layers()[0]["logical_length"] == 6 + 3  # the 4th token is not yet in the cache


def test_past_recording_keeps_sliding_layers_whole_until_a_crop(tiny, prompt_ids):
    result = generate_traced(
        tiny("tiny-gemma3"), ByteTokenizer(), prompt_ids(12), "dynamic", {}, 6, past_recording=True
    )
    sliding = [r for r in result.trace.layer_table() if r["layer_kind"] == "sliding"]
    assert all(r["slots_live"] == r["logical_length"] == 17 for r in sliding)
    result.cache_object.crop(-2)
    assert [int(layer.keys.shape[-2]) for layer in result.cache_object.layers][:2] == [7, 7]  # window 8 - 1


def test_past_recording_is_refused_for_static_caches(tiny, prompt_ids):
    with pytest.raises(kvlab.CacheOptionError, match="past recording is for dynamic and offloaded caches"):
        generate_traced(
            tiny("tiny-llama"), ByteTokenizer(), prompt_ids(4), "static", {"max_cache_len": 16}, 2, past_recording=True
        )
