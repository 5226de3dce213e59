"""The meta-device measurement against live caches, and `kvlab size` against the meta measurement.

A tiny random model of each cache family runs a real prefill and decode steps on the CPU into transformers' own
cache; every layer's tensors of cached data are counted with kvlab's storage counter (integer counters left out,
as a trace leaves them out). The same generation on the meta device
(`meta_cache_bytes`, no weights) must hold the same bytes in every layer, and the size calculator, which computes
from the layer facts measured on meta (`layer_facts`), must give the meta run's bytes and peak.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch
import transformers

from kvlab.recording.storage import held_tensors, storage_bytes
from kvlab.size import architecture, cache_size, from_config, from_config_file
from kvlab.size.layers import LayerFacts
from kvlab.size.meta import MetaRunError, layer_facts, meta_cache_bytes, shipped_facts

TINY = {"num_hidden_layers": 4, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4}
TINY_CONFIGS = {
    "llama": {**TINY, "num_key_value_heads": 2, "head_dim": 16},
    "gemma3_text": {**TINY, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 6, "sliding_window_pattern": 2},
    "llama4_text": {
        **TINY,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "attention_chunk_size": 6,
        "intermediate_size_mlp": 128,
        "num_local_experts": 2,
    },
    "deepseek_v3": {  # MLA: the cache keeps the compressed latent (32) and the rope key (8)
        **TINY,
        "num_key_value_heads": 4,
        "kv_lora_rank": 32,
        "q_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
    },
    "gpt_bigcode": {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_inner": 128, "multi_query": True},  # MQA
    "qwen3_next": {  # hybrid: Gated DeltaNet layers keep a conv and a recurrent state
        **TINY,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    },
    "t5": {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "d_kv": 16, "num_heads": 4, "d_ff": 128},
}


def tiny_config(model_type: str):
    return transformers.AutoConfig.for_model(model_type, vocab_size=128, **TINY_CONFIGS[model_type])


def live_layer_bytes(config, cache_kind: str, prefill: int, steps: int, max_cache_len: int | None, dtype):
    """Bytes of every cache layer after a real prefill and `steps` decode steps of a random tiny model on the CPU."""
    torch.manual_seed(0)
    auto = transformers.AutoModelForSeq2SeqLM if config.is_encoder_decoder else transformers.AutoModelForCausalLM
    model = auto.from_config(config, dtype=dtype).eval()

    def new_cache(length):
        if cache_kind == "static":
            return transformers.StaticCache(config=config, max_cache_len=length)
        return transformers.DynamicCache(config=config)

    cache = new_cache(max_cache_len)
    if config.is_encoder_decoder:
        cache = transformers.EncoderDecoderCache(cache, new_cache(prefill))
    ids = torch.randint(3, 100, (1, prefill))  # (1, prefill) token ids
    encoder = None
    with torch.no_grad():
        for step in range(steps + 1):
            step_ids = ids if step == 0 else torch.randint(3, 100, (1, 1))
            if config.is_encoder_decoder:
                inputs = {"decoder_input_ids": step_ids}
                inputs.update({"input_ids": ids} if encoder is None else {"encoder_outputs": encoder})
            else:
                inputs = {"input_ids": step_ids}
            out = model(**inputs, cache=cache, use_cache=True)
            if config.is_encoder_decoder:
                encoder = encoder or (out.encoder_last_hidden_state,)
    if config.is_encoder_decoder:
        pairs = zip(cache.self_attention_cache.layers, cache.cross_attention_cache.layers)
        layers = [layer for pair in pairs for layer in pair]
    else:
        layers = cache.layers
    return [storage_bytes(list(held_tensors(layer))) for layer in layers]  # what a trace counts: no counters


# (model type, cache kind, prefill, decode steps, static slots, dtype of the live run)
CASES = [
    ("llama", "dynamic", 5, 2, None, "float32"),
    ("llama", "static", 5, 2, 12, "float32"),
    ("gemma3_text", "dynamic", 9, 2, None, "float32"),  # the prefill outlives the 6-token window
    ("gemma3_text", "static", 4, 4, 10, "float32"),
    ("llama4_text", "dynamic", 8, 3, None, "float32"),  # chunked layers
    ("deepseek_v3", "dynamic", 5, 2, None, "bfloat16"),  # MLA
    ("deepseek_v3", "static", 5, 1, 9, "bfloat16"),
    ("gpt_bigcode", "dynamic", 5, 2, None, "float32"),  # MQA: one K and V head
    ("qwen3_next", "dynamic", 5, 2, None, "bfloat16"),  # linear attention + full
    ("t5", "dynamic", 6, 2, None, "float32"),  # encoder-decoder: self + cross
]


@pytest.mark.parametrize(
    "model_type,cache_kind,prefill,steps,slots,dtype", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_meta_bytes_equal_a_live_cache_layer_by_layer(model_type, cache_kind, prefill, steps, slots, dtype):
    config = tiny_config(model_type)
    live = live_layer_bytes(config, cache_kind, prefill, steps, slots, getattr(torch, dtype))
    # an encoder-decoder's encoder reads the prompt (`prefill` tokens) once: its cross layers hold that many
    common = {"prefill": prefill, "dtype": dtype, "source_tokens": prefill}
    meta = meta_cache_bytes(config, prefill + steps, cache_kind=cache_kind, max_cache_len=slots, **common)
    assert [layer.bytes for layer in meta.per_layer] == live
    assert meta.bytes == sum(live) and meta.peak_bytes >= meta.bytes
    # the calculator computes the same generation from the layer facts measured on meta
    options = {"max_cache_len": slots} if slots else {}
    size = cache_size(from_config(config), cache_kind, prefill + steps, **common, **options)
    assert (size.bytes, size.peak_bytes) == (meta.bytes, meta.peak_bytes)


def test_mla_caches_the_latent_and_the_rope_key_not_per_head_k_and_v():
    config = tiny_config("deepseek_v3")
    (first, *_) = meta_cache_bytes(config, 10, dtype="bfloat16").per_layer
    assert first == ("DynamicLayer", "full", 10 * (32 + 8) * 2)  # tokens x (kv_lora_rank + qk_rope_head_dim) x 2 B


def test_a_linear_layer_holds_the_same_state_whatever_the_context():
    config = tiny_config("qwen3_next")
    short, long = (meta_cache_bytes(config, n, dtype="bfloat16") for n in (4, 400))
    assert short.per_layer[0].layer_kind == "linear" and short.per_layer[0].bytes == long.per_layer[0].bytes > 0
    assert long.per_layer[1].bytes == 100 * short.per_layer[1].bytes  # the full layer grows with every token


@pytest.mark.parametrize("model_type", ["gemma3_text", "llama4_text", "t5"])
@pytest.mark.parametrize("cache_kind,slots", [("dynamic", None), ("static", 40)])
def test_calculator_equals_meta_past_windows_with_batch_and_dtype(model_type, cache_kind, slots):
    config, arch = tiny_config(model_type), from_config(tiny_config(model_type))
    for tokens, prefill, batch, dtype in ((30, 20, 3, "bfloat16"), (25, 3, 2, "float16"), (7, 7, 1, "float32")):
        meta = meta_cache_bytes(
            config, tokens, prefill=prefill, cache_kind=cache_kind, max_cache_len=slots, batch=batch, dtype=dtype
        )
        options = {"max_cache_len": slots} if slots else {}
        size = cache_size(arch, cache_kind, tokens, prefill=prefill, batch=batch, dtype=dtype, **options)
        assert (size.bytes, size.peak_bytes) == (meta.bytes, meta.peak_bytes), (tokens, prefill, batch, dtype)
        assert size.by_layer_kind == meta.by_layer_kind


def test_bytes_scale_with_the_element_size_when_the_run_needs_bfloat16():
    config = tiny_config("deepseek_v3")  # its experts' grouped matmul runs on meta in bfloat16 only
    wide, narrow = meta_cache_bytes(config, 6, dtype="float32"), meta_cache_bytes(config, 6, dtype="bfloat16")
    assert wide.run_dtype == "bfloat16" and wide.bytes == 2 * narrow.bytes


def test_a_model_transformers_cannot_run_on_meta_is_refused_in_one_line(monkeypatch):
    config = tiny_config("llama")
    config.num_attention_heads = 5  # 64 is not a multiple of 5 heads: transformers' own error
    config.head_dim = None
    with pytest.raises(MetaRunError, match=r"cannot run model_type 'llama' on the meta device \(") as err:
        meta_cache_bytes(config, 4)
    assert "\n" not in str(err.value)


# -- the shipped facts and today's flagships ------------------------------------------------------------------------
def _shipped_config(name: str):
    entry = json.loads((resources.files("kvlab") / "data/architectures.json").read_text())["models"][name]
    return transformers.AutoConfig.for_model(**entry["config"])


@pytest.mark.parametrize("name", ["llama-3-8b", "gemma-3-1b", "mamba-130m", "bart-large", "llama-4-scout"])
def test_shipped_layer_facts_are_what_the_meta_method_measures(name):
    assert layer_facts(_shipped_config(name)) == shipped_facts()[name]


def test_every_known_architecture_has_stored_layer_facts():
    stored = shipped_facts()
    for name, facts in stored.items():
        assert len(facts) == len(architecture(name).layer_kinds) * (2 if architecture(name).is_encoder_decoder else 1)


@pytest.mark.parametrize(
    "name,per_token",
    [
        ("deepseek-v3", 61 * (512 + 64) * 2),  # MLA latent + rope key, bfloat16
        ("kimi-k2", 61 * (512 + 64) * 2),
        ("llama-3.1-70b", 80 * 2 * 8 * 128 * 2),
        ("llama-3.1-405b", 126 * 2 * 8 * 128 * 2),
        ("mixtral-8x7b", 32 * 2 * 8 * 128 * 2),
    ],
)
def test_flagships_bytes_per_token(name, per_token):
    arch = architecture(name)
    one, two = (cache_size(arch, "dynamic", n, dtype="bfloat16").bytes for n in (1000, 2000))
    assert two - one == 1000 * per_token


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-next-80b-a3b", "gpt-oss-20b"])
def test_kvlab_size_of_a_flagship_config_file_matches_the_meta_method(name, tmp_path):
    """The config file is sized on meta (no stored facts); its answer is one meta run's, and the stored one's."""
    entry = json.loads((resources.files("kvlab") / "data/architectures.json").read_text())["models"][name]
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(entry["config"]))
    arch = from_config_file(path)
    size = cache_size(arch, "dynamic", 300, prefill=298, dtype="bfloat16")
    meta = meta_cache_bytes(arch.config, 300, prefill=298, dtype="bfloat16")
    assert (size.bytes, size.peak_bytes) == (meta.bytes, meta.peak_bytes)
    assert size.bytes == cache_size(architecture(name), "dynamic", 300, prefill=298, dtype="bfloat16").bytes


def test_a_measurement_is_remembered_and_a_damaged_memo_is_measured_again(monkeypatch, tmp_path):
    from kvlab.size import meta

    monkeypatch.setattr(meta, "memo_dir", lambda: tmp_path)
    monkeypatch.setattr(meta, "_FACTS", {})
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=64, num_attention_heads=4)
    measured = layer_facts(config)
    (memo,) = tmp_path.glob("*.json")
    monkeypatch.setattr(meta, "_FACTS", {})
    monkeypatch.setattr(meta, "_measure", lambda run: pytest.fail("measured again"))
    assert layer_facts(config) == measured  # read back, not measured
    memo.write_text('{"config": "trunc')
    monkeypatch.undo()
    monkeypatch.setattr(meta, "memo_dir", lambda: tmp_path)
    monkeypatch.setattr(meta, "_FACTS", {})
    assert layer_facts(config) == measured  # measured again and rewritten
    assert tuple(LayerFacts.from_json(f) for f in json.loads(memo.read_text())["facts"]) == measured
