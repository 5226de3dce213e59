"""Any model type transformers has, built tiny: the same structure as the full-size default config (layer kinds,
multi-query or latent attention, experts), small widths, and special token ids inside the tiny vocabulary."""

from __future__ import annotations

import pytest
import transformers

import kvlab
from kvlab.models.tiny import (
    FIRST_SPECIAL_ID,
    TINY_VOCAB,
    TINY_WIDTH,
    causal_lm_types,
    is_seq2seq_type,
    shrunk_config,
    tiny_config,
)


def test_types_are_transformers_causal_and_seq2seq_ones():
    types = causal_lm_types()
    assert {"llama", "mamba", "qwen3_next", "t5", "bart"} <= set(types)
    assert "bert-base-uncased" not in types and "vit" not in types  # a checkpoint name, an image model
    assert is_seq2seq_type("t5") and is_seq2seq_type("bart") and not is_seq2seq_type("llama")


def test_a_layer_pattern_keeps_one_period():
    full = transformers.AutoConfig.for_model("gemma3_text")
    tiny = shrunk_config("gemma3_text")
    period = full.layer_types.index("full_attention") + 1
    assert tiny.layer_types == full.layer_types[:period] and tiny.num_hidden_layers == period
    assert tiny.hidden_size == TINY_WIDTH and tiny.vocab_size == TINY_VOCAB and tiny.sliding_window == 8
    hybrid = shrunk_config("qwen3_next")
    assert hybrid.layer_types == ["linear_attention"] * 3 + ["full_attention"]


def test_layer_index_lists_follow_the_kept_layers():
    text = shrunk_config("llama4").text_config
    assert text.layer_types == ["chunked_attention"] * 3 + ["full_attention"] and text.attention_chunk_size == 8
    assert text.moe_layers == [0, 1, 2, 3] and text.no_rope_layers == [1, 1, 1, 0]


def test_a_layer_that_reads_another_layers_cache_reads_a_kept_one():
    """Kolibri's `kv_source_layers`: each layer's K/V source, an earlier layer's index (new in transformers 5.25)."""
    full = transformers.AutoConfig.for_model("kolibri1_1")
    assert any(source != i for i, source in enumerate(full.kv_source_layers))
    tiny = shrunk_config("kolibri1_1")  # transformers' own validation: every source kept, of the reader's kind
    sources = tiny.kv_source_layers
    assert len(sources) == tiny.num_hidden_layers and all(0 <= s <= i for i, s in enumerate(sources))
    assert any(s != i for i, s in enumerate(sources))  # some layer still reads another's
    assert all(tiny.layer_types[s] == tiny.layer_types[i] for i, s in enumerate(sources))


def test_attention_structure_is_kept():
    assert shrunk_config("gpt_bigcode").multi_query  # one KV head stays one
    llama = shrunk_config("llama")  # as many KV heads as query heads stays so
    assert llama.num_key_value_heads == llama.num_attention_heads
    mla = shrunk_config("deepseek_v3")  # latent attention: a small latent and rope key, dense first layer, experts
    assert (mla.kv_lora_rank, mla.qk_rope_head_dim, mla.head_dim) == (32, 8, 8)
    assert mla.first_k_dense_replace == 1 and mla.num_hidden_layers == 2 and mla.n_routed_experts == 4


def test_special_token_ids_move_inside_the_vocabulary_consistently():
    full = transformers.AutoConfig.for_model("gemma3")
    tiny = shrunk_config("gemma3")
    assert full.image_token_id >= TINY_VOCAB
    ids = [tiny.image_token_id, tiny.boi_token_index, tiny.eoi_token_index]
    assert all(FIRST_SPECIAL_ID <= i < TINY_VOCAB for i in ids) and len(set(ids)) == 3
    assert tiny.text_config.vocab_size == TINY_VOCAB
    assert tiny.text_config.eos_token_id == full.text_config.eos_token_id  # already inside: unchanged


def test_tiny_model_builds_any_type_with_its_generating_class():
    assert type(kvlab.tiny_model("t5")).__name__ == "T5ForConditionalGeneration"
    assert type(kvlab.tiny_model("qwen3_next")).__name__ == "Qwen3NextForCausalLM"
    assert type(kvlab.tiny_model("tiny-llama")).__name__ == "LlamaForCausalLM"  # the named tiny models stay


def test_an_unknown_name_lists_what_is_valid():
    with pytest.raises(ValueError, match=r"unknown tiny model 'vit'; valid: tiny-llama, .*causal_lm_types"):
        tiny_config("vit")


def test_a_model_that_needs_a_kind_twice_gets_two():
    # Zamba ties its shared attention block across hybrid layers: with one hybrid layer transformers refuses to build
    with pytest.raises(ValueError, match="tie_weights_keys"):
        transformers.AutoModelForCausalLM.from_config(shrunk_config("zamba"))
    model = kvlab.tiny_model("zamba")
    assert model.config.layers_block_type.count("hybrid") == 2
    assert shrunk_config("recurrent_gemma").block_types == ["recurrent", "recurrent", "attention"]  # a cycle, whole
