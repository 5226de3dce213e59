"""The bundled real models: what they are, that kvlab's caches are exact on them, and drop-in equal."""

import pytest
import torch
from transformers import DynamicCache, QuantizedCache, StaticCache

import kvlab
from kvlab.caches import CacheCropError, CacheOptionError
from kvlab.recording.layer_state import layer_kinds
from kvlab.recording.storage import storage_bytes, view_bytes

PROMPT = "The key-value cache of a transformer stores, for every layer, the keys and values of past tokens."


def test_bundled_facts(smollm2, gemma3):
    for (model, tokenizer), name in ((smollm2, "smollm2"), (gemma3, "gemma3")):
        facts = kvlab.BUNDLED[name].facts
        config = model.config
        assert config.num_hidden_layers == facts["layers"]
        assert config.num_key_value_heads == facts["kv_heads"] and config.head_dim == facts["head_dim"]
        assert (tokenizer.chat_template is not None) == facts["chat_template"]
    assert set(layer_kinds(smollm2[0].config)) == {"full"}
    gemma_kinds = layer_kinds(gemma3[0].config)
    assert gemma_kinds == (["sliding"] * 5 + ["full"]) * 3 and gemma3[0].config.sliding_window == 512
    assert "<|im_start|>" in smollm2[1].chat_template


@pytest.mark.parametrize("kind, options", [("dynamic", {}), ("static", {"max_cache_len": 40})])
def test_smollm2_bytes_follow_the_formula_and_the_storage(smollm2, kind, options):
    model, tok = smollm2
    result = kvlab.run(model, tok, PROMPT, cache=kind, max_new_tokens=6, **options)
    slots = result.prompt_tokens + 6 - 1 if kind == "dynamic" else 40  # the last token is never cached
    formula = 2 * 30 * 3 * 64 * slots * 4  # 2 (k, v) x layers x kv_heads x head_dim x slots x float32
    summary = result.trace.summary()
    true_storage = sum(storage_bytes(layer.keys, layer.values) for layer in result.cache_object.layers)
    assert summary["final_bytes"] == formula == true_storage
    assert summary["slots_allocated"] == 30 * slots
    assert summary["slots_masked"] == (0 if kind == "dynamic" else 30 * (40 - result.prompt_tokens - 5))


def test_gemma3_sliding_layers_stop_at_the_window_and_bytes_are_storage_not_views(gemma3):
    model, tok = gemma3
    ids = torch.arange(1000, 1000 + 700).unsqueeze(0)  # 700 tokens: past the 512 window
    cache = kvlab.make_cache("dynamic", model.config)
    per_slot = 2 * 1 * 256 * 4  # keys + values, 1 kv head x 256, float32
    with torch.inference_mode():
        model(ids, cache=cache)
        # right after the prefill the sliding layers keep 511-token views of the 700-token states
        views = sum(view_bytes(layer.keys, layer.values) for layer in cache.layers)
        assert views == (3 * 700 + 15 * 511) * per_slot  # 20.0 MB
        assert cache.trace.summary()["final_bytes"] == 18 * 700 * per_slot  # 25.8 MB of storage
        model(torch.tensor([[1700]]), cache=cache)
    final = cache.trace.layer_table()
    assert {r["slots_live"] for r in final if r["layer_kind"] == "sliding"} == {511}
    assert {r["slots_live"] for r in final if r["layer_kind"] == "full"} == {701}
    assert {r["tokens_evicted"] for r in final if r["layer_kind"] == "sliding"} == {701 - 511}
    # a decode step concatenates 511 + 1 and keeps a 511 view of it
    assert cache.trace.summary()["final_bytes"] == 3 * 701 * per_slot + 15 * 512 * per_slot


def test_gemma3_static_cache_is_capped_by_the_window_and_refuses_wrapped_crops(gemma3):
    model, tok = gemma3
    ids = torch.arange(1000, 1000 + 520).unsqueeze(0)
    cache = kvlab.make_cache("static", model.config, max_cache_len=600)
    with torch.inference_mode():
        model(ids, cache=cache)
    table = cache.trace.layer_table()
    assert {(r["slots_allocated"], r["slots_live"]) for r in table if r["layer_kind"] == "sliding"} == {(512, 512)}
    assert {(r["slots_allocated"], r["slots_live"], r["slots_masked"]) for r in table if r["layer_kind"] == "full"} == {
        (600, 520, 80)
    }
    assert cache.trace.summary()["final_bytes"] == (15 * 512 + 3 * 600) * 2 * 256 * 4
    with pytest.raises(CacheCropError, match="already evicted"):
        cache.crop(-3)
    with pytest.raises(CacheOptionError, match="15 sliding, 3 full"):
        kvlab.make_cache("quantized", model.config, backend="quanto")


@pytest.mark.parametrize(
    "kind, options, reference",
    [
        ("dynamic", {}, lambda c: DynamicCache(config=c)),
        ("static", {"max_cache_len": 48}, lambda c: StaticCache(config=c, max_cache_len=48)),
        ("offloaded", {}, lambda c: DynamicCache(config=c)),
        (
            "quantized",
            {"backend": "quanto", "nbits": 4, "residual_length": 8},
            lambda c: QuantizedCache("quanto", c, nbits=4, residual_length=8),
        ),
        (
            "quantized",
            {"backend": "hqq", "nbits": 2, "axis_key": 1, "axis_value": 1, "residual_length": 8},
            lambda c: QuantizedCache("hqq", c, nbits=2, axis_key=1, axis_value=1, residual_length=8),
        ),
    ],
)
def test_smollm2_drop_in(smollm2, kind, options, reference):
    model, tok = smollm2
    ids = tok(PROMPT, return_tensors="pt").input_ids[:, :20]  # 20 tokens: divisible by 4, so hqq 2-bit packs upstream
    # 8 new tokens: hqq quantizes the prefill and flushes its residual once (hqq's solver is slow on a CPU)
    kwargs = dict(max_new_tokens=8, do_sample=False, return_dict_in_generate=True, output_logits=True)
    with torch.inference_mode():
        ours = model.generate(ids, cache=kvlab.make_cache(kind, model.config, **options), **kwargs)
        theirs = model.generate(ids, cache=reference(model.config), **kwargs)
    assert torch.equal(ours.sequences, theirs.sequences)
    torch.testing.assert_close(torch.stack(ours.logits), torch.stack(theirs.logits), rtol=0, atol=0)
