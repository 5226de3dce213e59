"""kvlab.measure.rollback: cached positions, and speculative decoding that crops rejected drafts."""

import pytest
import torch

import kvlab
from kvlab.measure.rollback import cached_positions, holdings, prompt_lookup_draft, speculative_generate


def corrupted_draft(truth: list[int], prompt_length: int, every: int = 3, vocab_size: int = 128):
    """A draft that knows the true continuation `truth` (ids after the prompt) but gets every `every`-th guess
    wrong: a controlled mix of accepts and rejects."""

    def draft(ids: list[int], k: int) -> list[int]:
        done = len(ids) - prompt_length
        guesses = list(truth[done : done + k])
        for i in range(len(guesses)):
            if (done + i) % every == every - 1:
                guesses[i] = (guesses[i] + 1) % vocab_size
        return guesses

    return draft


def test_prompt_lookup_proposes_what_followed_the_last_ngram():
    draft = prompt_lookup_draft(ngram=2)
    assert draft([1, 2, 3, 4, 9, 1, 2], 2) == [3, 4]
    assert draft([1, 2, 3, 4, 9, 1, 2], 5) == [3, 4, 9, 1, 2]
    assert draft([1, 2, 3], 4) == []


def test_speculative_output_equals_greedy_and_rejections_are_cropped(greedy, tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    truth = greedy(model, ids, new_tokens=14)[0, ids.shape[-1] :].tolist()
    result = speculative_generate(model, ids, 14, corrupted_draft(truth, ids.shape[-1], every=3), k=4)
    assert result.token_ids == truth
    assert result.rejected > 0 and result.accepted > 0
    assert result.forwards < 14  # fewer forwards than one per token
    assert result.forwards == 1 + len(result.steps)  # the prefill, then one step per forward
    crops = result.cache.trace.crops
    assert [c["n"] for c in crops] == [-s.rejected for s in result.steps if s.rejected]
    # invariant: the cache holds everything but the last token
    assert result.cache.get_seq_length() == ids.shape[-1] + len(truth) - 1


def test_a_forward_whose_draft_proposes_nothing_is_a_step_too(greedy, tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    result = speculative_generate(model, ids, 5, lambda committed, k: [], k=4)
    assert result.token_ids == greedy(model, ids, new_tokens=5)[0, ids.shape[-1] :].tolist()
    assert result.forwards == 5 == 1 + len(result.steps)  # no draft: one token per forward, like greedy
    assert all(s.drafted == () and s.accepted == s.rejected == 0 for s in result.steps)


def test_sliding_layers_past_the_window_need_past_recording(greedy, tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(12)  # window 8
    truth = greedy(model, ids, new_tokens=12)[0, ids.shape[-1] :].tolist()
    with pytest.raises(kvlab.CacheCropError, match="activate_past_recording"):
        speculative_generate(model, ids, 12, corrupted_draft(truth, ids.shape[-1]), k=3)
    result = speculative_generate(model, ids, 12, corrupted_draft(truth, ids.shape[-1]), k=3, past_recording=True)
    assert result.token_ids == truth
    assert all(c["past_recording"] for c in result.cache.trace.crops)


def test_cached_positions_full_vs_sliding(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(14)
    cache = kvlab.run(model, None, ids, max_new_tokens=5).cache_object
    rows = cached_positions(cache)
    seen = ids.shape[-1] + 4
    full = [r for r in rows if r["layer_kind"] == "full"]
    sliding = [r for r in rows if r["layer_kind"] == "sliding"]
    assert full and sliding
    assert all(r["positions_live"] == list(range(seen)) == r["positions_visible"] for r in full)
    assert all(
        r["positions_live"] == list(range(seen - 7, seen)) == r["positions_visible"] and r["window"] == 8
        for r in sliding
    )


def test_recorded_past_is_live_but_not_visible(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(14)
    cache = kvlab.make_cache("dynamic", model.config)
    cache.activate_past_recording()
    model(ids, cache=cache)
    sliding = next(r for r in cached_positions(cache) if r["layer_kind"] == "sliding")
    assert sliding["positions_live"] == list(range(14))
    assert sliding["positions_visible"] == list(range(7, 14))


def test_crop_then_continue_regenerates_the_cropped_tokens(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    first = kvlab.run(model, None, ids, max_new_tokens=8)
    cache = first.cache_object
    cache.crop(-3)
    assert holdings(cache)["full"]["tokens"] == 6 + 7 - 3
    kept = torch.tensor([ids[0].tolist() + first.generated_token_ids[:5]])
    with torch.inference_mode():
        regenerated = model.generate(
            kept, attention_mask=torch.ones_like(kept), do_sample=False, max_new_tokens=3, past_key_values=cache
        )
    assert regenerated[0, kept.shape[-1] :].tolist() == first.generated_token_ids[5:8]
    assert cache.get_seq_length() == 6 + 7  # the same cache object was extended, not replaced


def test_holdings_show_a_crop_keeps_the_storage_until_the_next_update(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(10)
    cache = kvlab.run(model, None, ids, max_new_tokens=2).cache_object
    before = holdings(cache)["full"]
    cache.crop(-4)
    after = holdings(cache)["full"]
    assert (after["slots_live"], after["bytes_per_layer"]) == (before["slots_live"] - 4, before["bytes_per_layer"])
    model(torch.tensor([[5]]), cache=cache)
    assert holdings(cache)["full"]["bytes_per_layer"] == before["bytes_per_layer"] * 8 // 11  # 8 slots of 11


def test_holdings_total_the_bytes_of_every_layer_of_a_kind(tiny, prompt_ids):
    model, ids = tiny("tiny-gemma3"), prompt_ids(12)
    cache = kvlab.run(model, None, ids, max_new_tokens=2).cache_object
    held = holdings(cache)
    assert held["full"]["layers"] + held["sliding"]["layers"] == len(cache.layers)
    for layer_kind in ("full", "sliding"):
        layers = [layer for i, layer in enumerate(cache.layers) if cache._kvlab_layer_kind(i) == layer_kind]
        # storage, not the view: a sliding layer's keys are a slice of the last update's concatenation
        per_layer = [
            layer.keys.untyped_storage().nbytes() + layer.values.untyped_storage().nbytes() for layer in layers
        ]
        assert held[layer_kind]["bytes_per_layer"] == max(per_layer)
        assert held[layer_kind]["bytes_all_layers"] == sum(per_layer)
