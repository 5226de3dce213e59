"""tiny-llama4: chunked attention layers (Llama 4 style), cached by transformers like sliding ones."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab.recording.layer_state import layer_kinds


def generate(model, ids, cache, new_tokens):
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        past_key_values=cache,
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
    )


def test_structure():
    model = kvlab.tiny_model("tiny-llama4")
    config = model.config
    assert type(model).__name__ == "Llama4ForCausalLM"
    assert config.layer_types == ["chunked_attention"] * 3 + ["full_attention"] and config.attention_chunk_size == 8
    assert layer_kinds(config) == ["chunked"] * 3 + ["full"]
    assert "tiny-llama4" in kvlab.TINY_MODELS


def test_chunked_layers_stop_at_chunk_minus_one_full_layer_grows(prompt_ids):
    model = kvlab.tiny_model("tiny-llama4")
    cache = DynamicCache(config=model.config)
    generate(model, prompt_ids(13), cache, new_tokens=10)
    assert [type(layer).__name__ for layer in cache.layers] == ["DynamicSlidingWindowLayer"] * 3 + ["DynamicLayer"]
    assert [layer.keys.shape[-2] for layer in cache.layers] == [7, 7, 7, 22]
    assert [layer.get_seq_length() for layer in cache.layers] == [22] * 4


def test_crop_past_the_chunk_needs_past_recording(prompt_ids):
    model = kvlab.tiny_model("tiny-llama4")
    cache = DynamicCache(config=model.config)
    generate(model, prompt_ids(13), cache, new_tokens=4)
    with pytest.raises(RuntimeError, match="activate_past_recording"):
        cache.crop(-3)
    recorded = DynamicCache(config=model.config)
    recorded.activate_past_recording()
    generate(model, prompt_ids(13), recorded, new_tokens=4)
    recorded.crop(-3)
    assert [layer.get_seq_length() for layer in recorded.layers] == [13] * 4
    assert [layer.keys.shape[-2] for layer in recorded.layers] == [7, 7, 7, 13]


def test_same_tokens_with_and_without_watch(prompt_ids):
    model = kvlab.tiny_model("tiny-llama4")
    plain = generate(model, prompt_ids(11), DynamicCache(config=model.config), new_tokens=6)
    with kvlab.watch(model) as watch:
        watched = generate(model, prompt_ids(11), DynamicCache(config=model.config), new_tokens=6)
    assert torch.equal(plain, watched)
    assert watch.trace.meta["layer_kinds"] == ["chunked"] * 3 + ["full"]
