"""tiny-llama4: chunked attention layers (Llama 4 style), cached by transformers like sliding ones."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab.recording.layer_state import layer_kinds


def test_structure():
    model = kvlab.tiny_model("tiny-llama4")
    config = model.config
    assert type(model).__name__ == "Llama4ForCausalLM"
    assert config.layer_types == ["chunked_attention"] * 3 + ["full_attention"] and config.attention_chunk_size == 8
    assert layer_kinds(config) == ["chunked"] * 3 + ["full"]
    assert "tiny-llama4" in kvlab.TINY_MODELS


def test_chunked_layers_stop_at_chunk_minus_one_full_layer_grows(greedy, prompt_ids):
    model = kvlab.tiny_model("tiny-llama4")
    cache = DynamicCache(config=model.config)
    greedy(model, prompt_ids(13), cache, 10)
    assert [type(layer).__name__ for layer in cache.layers] == ["DynamicSlidingWindowLayer"] * 3 + ["DynamicLayer"]
    assert [layer.keys.shape[-2] for layer in cache.layers] == [7, 7, 7, 22]
    assert [layer.get_seq_length() for layer in cache.layers] == [22] * 4


def test_crop_past_the_chunk_needs_past_recording(greedy, prompt_ids):
    model = kvlab.tiny_model("tiny-llama4")
    cache = DynamicCache(config=model.config)
    greedy(model, prompt_ids(13), cache, 4)
    with pytest.raises(RuntimeError, match="activate_past_recording"):
        cache.crop(-3)
    recorded = DynamicCache(config=model.config)
    recorded.activate_past_recording()
    greedy(model, prompt_ids(13), recorded, 4)
    recorded.crop(-3)
    assert [layer.get_seq_length() for layer in recorded.layers] == [13] * 4
    assert [layer.keys.shape[-2] for layer in recorded.layers] == [7, 7, 7, 13]


def test_same_tokens_with_and_without_watch(greedy, prompt_ids):
    model = kvlab.tiny_model("tiny-llama4")
    plain = greedy(model, prompt_ids(11), DynamicCache(config=model.config), 6)
    with kvlab.watch(model) as watch:
        watched = greedy(model, prompt_ids(11), DynamicCache(config=model.config), 6)
    assert torch.equal(plain, watched)
    assert watch.trace.meta["layer_kinds"] == ["chunked"] * 3 + ["full"]
