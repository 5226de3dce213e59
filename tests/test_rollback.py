"""kvlab.rollback: cached positions, and speculative decoding that crops rejected drafts."""

import pytest

import kvlab
from kvlab.rollback import cached_positions, corrupted_draft, prompt_lookup_draft, speculative_generate


def greedy(model, ids, n):
    return kvlab.run(model, None, ids, max_new_tokens=n).generated_token_ids


def test_prompt_lookup_proposes_what_followed_the_last_ngram():
    draft = prompt_lookup_draft(ngram=2)
    assert draft([1, 2, 3, 4, 9, 1, 2], 2) == [3, 4]
    assert draft([1, 2, 3, 4, 9, 1, 2], 5) == [3, 4, 9, 1, 2]
    assert draft([1, 2, 3], 4) == []


def test_speculative_output_equals_greedy_and_rejections_are_cropped(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    truth = greedy(model, ids, 14)
    result = speculative_generate(model, ids, 14, corrupted_draft(truth, every=3, vocab_size=128), k=4)
    assert result.token_ids == truth
    assert result.rejected > 0 and result.accepted > 0
    assert result.forwards < 14  # fewer forwards than one per token
    crops = result.cache.trace.crops
    assert [c["n"] for c in crops] == [-s.rejected for s in result.steps if s.rejected]
    # invariant: the cache holds everything but the last token
    assert result.cache.get_seq_length() == ids.shape[-1] + len(truth) - 1


def test_sliding_layers_past_the_window_need_past_recording(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(12)  # window 8
    truth = greedy(model, ids, 12)
    with pytest.raises(RuntimeError, match="does not track past states"):
        speculative_generate(model, ids, 12, corrupted_draft(truth, vocab_size=128), k=3)
    result = speculative_generate(model, ids, 12, corrupted_draft(truth, vocab_size=128), k=3, past_recording=True)
    assert result.token_ids == truth
    assert all(c["past_recording"] for c in result.cache.trace.crops)


def test_cached_positions_full_vs_sliding(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(14)
    cache = kvlab.run(model, None, ids, max_new_tokens=5).cache_object
    rows = cached_positions(cache)
    seen = ids.shape[-1] + 4
    full = [r for r in rows if r["kind"] == "full"]
    sliding = [r for r in rows if r["kind"] == "sliding"]
    assert full and sliding
    assert all(r["held"] == list(range(seen)) == r["visible"] for r in full)
    assert all(r["held"] == list(range(seen - 7, seen)) == r["visible"] and r["window"] == 8 for r in sliding)


def test_recorded_past_is_held_but_not_visible(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(14)
    cache = kvlab.make_cache("dynamic", model.config)
    cache.activate_past_recording()
    model(ids, cache=cache)
    sliding = next(r for r in cached_positions(cache) if r["kind"] == "sliding")
    assert sliding["held"] == list(range(14))
    assert sliding["visible"] == list(range(7, 14))
