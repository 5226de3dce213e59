"""Seen, live and stored tokens per layer, read from traces of tiny models under kvlab.watch."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure import formula
from kvlab.measure.layer_lengths import layer_lengths


def watched_generate(model, ids, new_tokens):
    with kvlab.watch(model) as watch:
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            past_key_values=DynamicCache(config=model.config),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
        )
    return watch.trace


def per_token(model):
    return formula.bytes_per_token_per_layer(model.config, torch.float32)


def test_prefill_past_the_window_stores_the_prompt_but_keeps_window_minus_one_live(tiny, prompt_ids):
    model = tiny("tiny-gemma3")  # window 8; layers sliding, sliding, full, x2
    trace = watched_generate(model, prompt_ids(12), new_tokens=3)
    prefill = layer_lengths(trace, per_token(model), step=0)
    assert [(x.layer_kind, x.seen, x.live, x.slots_stored) for x in prefill[:3]] == [
        ("sliding", 12, 7, 12),
        ("sliding", 12, 7, 12),
        ("full", 12, 12, 12),
    ]
    final = layer_lengths(trace, per_token(model))  # two decode steps later: 14 seen
    assert [(x.layer_kind, x.seen, x.live, x.slots_stored) for x in final[:3]] == [
        ("sliding", 14, 7, 8),
        ("sliding", 14, 7, 8),
        ("full", 14, 14, 14),
    ]  # the window copied: 7 + 1 stored
    assert [x.layer_idx for x in final] == list(range(6))


def test_below_the_window_every_number_agrees(tiny, prompt_ids):
    model = tiny("tiny-gemma3")
    lengths = layer_lengths(watched_generate(model, prompt_ids(5), new_tokens=1), per_token(model))
    assert {(x.seen, x.live, x.slots_stored) for x in lengths} == {(5, 5, 5)}


def test_chunked_layers_cap_like_sliding_ones(tiny, prompt_ids):
    model = tiny("tiny-llama4")  # chunks of 8 in layers 0-2, layer 3 full
    lengths = layer_lengths(watched_generate(model, prompt_ids(13), new_tokens=10), per_token(model))
    assert [(x.layer_kind, x.seen, x.live) for x in lengths] == [("chunked", 22, 7)] * 3 + [("full", 22, 22)]


def test_bad_arguments_are_refused(tiny, prompt_ids):
    model = tiny("tiny-llama")
    trace = watched_generate(model, prompt_ids(4), new_tokens=2)
    with pytest.raises(ValueError, match="no step 9"):
        layer_lengths(trace, per_token(model), step=9)
    with pytest.raises(ValueError, match="positive"):
        layer_lengths(trace, 0)
