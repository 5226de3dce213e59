"""Known architectures: the facts `kvlab size` reads without transformers are what transformers derives."""

import json

import pytest

from kvlab.size.architecture import (
    _config_from_dict,
    _facts,
    architecture,
    derived_facts,
    from_config,
    known_architectures,
)


@pytest.mark.parametrize("name", known_architectures())
def test_stored_facts_are_transformers_own_reading(name):
    config = _config_from_dict(_facts()[name]["config"])
    arch = architecture(name)
    assert json.loads(json.dumps(derived_facts(config))) == derived_facts(arch.config)
    assert arch == from_config(config, name=name, source=arch.source, dtype=arch.dtype, note=arch.note)


def write_config(tmp_path, **keys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(keys))
    return path


BERT = {
    "architectures": ["BertForMaskedLM"],
    "model_type": "bert",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 512,
}


def test_an_encoder_only_config_is_refused_in_one_line(tmp_path):
    from kvlab.size import NoKVCacheError, from_config_file

    path = write_config(tmp_path, **BERT)
    with pytest.raises(NoKVCacheError) as err:
        from_config_file(path)
    message = str(err.value)
    assert message.startswith(f"{path} is an encoder-only model (model_type 'bert'; is_decoder false; architectures ")
    assert "keeps no KV cache, so there is nothing to size" in message and "\n" not in message
    with pytest.raises(NoKVCacheError, match=r"model_type 'distilbert'; no is_decoder"):
        from_config_file(write_config(tmp_path, model_type="distilbert", n_layers=2, dim=64, n_heads=4))


def test_decoders_are_sized_whatever_their_is_decoder_says(tmp_path):
    from kvlab.size import from_config_file

    bert_decoder = from_config_file(write_config(tmp_path, **{**BERT, "is_decoder": True}))  # BertLMHeadModel's
    assert bert_decoder.layer_kinds == ("full", "full") and bert_decoder.max_positions == 512
    neox = write_config(tmp_path, model_type="gpt_neox", num_hidden_layers=2, hidden_size=64, num_attention_heads=4)
    assert from_config_file(neox).kv_heads == 4  # GPT-NeoX's config says is_decoder false: it is a decoder
    assert from_config_file(write_config(tmp_path, model_type="bart", max_position_embeddings=1024)).is_encoder_decoder


def test_the_position_limit_is_part_of_the_facts():
    assert architecture("smollm2").max_positions == 8192 and architecture("mamba-130m").max_positions is None


def test_xlm_is_sized_as_its_trace_counts_it():
    """XLM's config has no is_decoder (its `causal` flag only shapes the mask) and its causal-LM class fills a
    DynamicCache in generate, a mask token past the ids each step: kvlab size agrees with the trace that it caches,
    and on the bytes. BERT's flag still says it does not."""
    import torch
    import transformers

    import kvlab
    from kvlab.size import NoKVCacheError, cache_size, from_config
    from kvlab.size.meta import meta_cache_bytes

    model = kvlab.tiny_model("xlm")
    assert not model.config.causal
    arch = from_config(model.config)  # not refused as encoder-only
    ids = torch.randint(3, 100, (1, 6), generator=torch.Generator().manual_seed(0))  # (batch, tokens)
    with kvlab.watch(model) as watch:
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3, do_sample=False)
    traced = watch.trace.summary()["final_bytes"]
    assert traced > 0
    assert meta_cache_bytes(model.config, 6 + 3 - 1, prefill=6).bytes == traced
    assert cache_size(arch, "dynamic", 6 + 3 - 1, prefill=6).bytes == traced
    with pytest.raises(NoKVCacheError):
        from_config(transformers.BertConfig(is_decoder=False))
