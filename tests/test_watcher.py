"""`kvlab.watch`: unchanged transformers code, recorded; the same tokens and logits; everything restored after.

Guide-style code on tiny random-weight models (every cache kind) and on SmolLM2 (the guide's own samples)."""

import copy

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    DynamicCache,
    EncoderDecoderCache,
    QuantizedCache,
    StaticCache,
)

import kvlab
from kvlab import _compat
from kvlab.caches import crop_rules
from kvlab.recording.storage import storage_bytes

KINDS = [  # (id, generate kwargs, models)
    ("default", {}, ["tiny-llama", "tiny-gemma3", "tiny-mamba", "tiny-jamba", "tiny-bart"]),
    ("dynamic", {"cache_implementation": "dynamic"}, ["tiny-llama", "tiny-gemma3"]),
    ("static", {"cache_implementation": "static"}, ["tiny-llama", "tiny-gemma3", "tiny-bart"]),
    (
        "quanto-int4",
        {"cache_implementation": "quantized", "cache_config": {"backend": "quanto", "residual_length": 4}},
        ["tiny-llama"],
    ),
    (
        "hqq-int4-axis1",
        {
            "cache_implementation": "quantized",
            "cache_config": {
                "backend": "hqq",
                "nbits": 4,
                "axis_key": 1,
                "axis_value": 1,
                "q_group_size": 16,
                "residual_length": 4,
            },
        },
        ["tiny-llama"],
    ),
    ("fp8", {"cache_implementation": "quantized", "cache_config": {"backend": "fp8"}}, ["tiny-llama"]),
]
PARAMS = [pytest.param(kwargs, name, id=f"{cid}-{name}") for cid, kwargs, names in KINDS for name in names]


def generate(model, ids, **kwargs):
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=8,
        min_new_tokens=8,
        do_sample=False,
        return_dict_in_generate=True,
        output_logits=True,
        pad_token_id=0,
        **kwargs,
    )
    return out.sequences, torch.stack(out.logits)


def kv_tensors(cache):
    caches = (
        [cache.self_attention_cache, cache.cross_attention_cache] if isinstance(cache, EncoderDecoderCache) else [cache]
    )
    return [t for c in caches for layer in c.layers for t in (layer.keys, layer.values) if isinstance(t, torch.Tensor)]


def assert_released(model):
    assert not model._forward_pre_hooks and not model._forward_hooks


@pytest.mark.parametrize("kwargs, model_name", PARAMS)
def test_generate_is_bit_identical_and_recorded(tiny, prompt_ids, kwargs, model_name):
    model = tiny(model_name)
    ids = prompt_ids(16)
    plain_seq, plain_logits = generate(model, ids, **copy.deepcopy(kwargs))
    with kvlab.watch(model) as watch:
        seq, logits = generate(model, ids, **copy.deepcopy(kwargs))
    assert torch.equal(seq, plain_seq)
    torch.testing.assert_close(logits, plain_logits, rtol=0, atol=0)
    assert len(watch.traces) == 1
    summary = watch.trace.summary()
    assert summary["steps"] == 8  # the prefill and 7 decoding steps
    assert summary["peak_bytes"] > 0
    assert watch.trace.meta["watched"] is True
    assert_released(model)


def test_bytes_match_the_storage_and_the_cache_goes_back(tiny, prompt_ids):
    model = tiny("tiny-gemma3")
    cache = StaticCache(config=model.config, max_cache_len=40)  # built by the user, as in the guide
    with kvlab.watch(model) as watch:
        assert type(cache) is StaticCache  # nothing happens before the model uses it
        generate(model, prompt_ids(12), past_key_values=cache)
        assert isinstance(cache, kvlab.InstrumentedStaticCache)
        assert watch.trace.summary()["final_bytes"] == storage_bytes(*kv_tensors(cache))
    assert type(cache) is StaticCache
    assert not [name for name in vars(cache) if "kvlab" in name]
    assert watch.trace.meta["cache_kind"] == "static" and watch.trace.meta["cache_class"] == "StaticCache"
    assert watch.trace.summary()["slots_masked"] > 0


def test_restores_everything_when_the_block_raises(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = DynamicCache(config=model.config)
    with pytest.raises(KeyboardInterrupt):
        with kvlab.watch(model):
            model(prompt_ids(6), past_key_values=cache)
            assert isinstance(cache, kvlab.InstrumentedDynamicCache)
            raise KeyboardInterrupt
    assert type(cache) is DynamicCache
    assert_released(model)
    model(prompt_ids(6, seed=1), past_key_values=cache)  # a plain cache again, still usable


def test_prefix_recipe_deep_copies_are_watched(smollm2):
    model, tokenizer = smollm2
    prefix = "You are a helpful assistant. "
    questions = ["What is the capital of France?", "Name a color."]
    prompt_cache = StaticCache(config=model.config, max_cache_len=48)
    with kvlab.watch(model) as watch:
        with torch.no_grad():
            prompt_cache = _compat.output_cache(
                model(**tokenizer(prefix, return_tensors="pt"), past_key_values=prompt_cache)
            )
        answers = []
        for question in questions:
            cache = copy.deepcopy(prompt_cache)
            answers.append(
                model.generate(
                    **tokenizer(prefix + question, return_tensors="pt"),
                    past_key_values=cache,
                    max_new_tokens=4,
                    do_sample=False,
                )
            )
    plain = []
    for question in questions:  # the same recipe, unwatched
        cache = StaticCache(config=model.config, max_cache_len=48)
        with torch.no_grad():
            model(**tokenizer(prefix, return_tensors="pt"), past_key_values=cache)
        plain.append(
            model.generate(
                **tokenizer(prefix + question, return_tensors="pt"),
                past_key_values=cache,
                max_new_tokens=4,
                do_sample=False,
            )
        )
    assert all(torch.equal(a, b) for a, b in zip(answers, plain))
    assert len(watch.traces) == 3
    assert [t.meta.get("copied_from") for t in watch.traces] == [None, 0, 0]
    prefill_events = len(watch.traces[0].events)
    assert all(t.meta["copied_at_event"] == prefill_events for t in watch.traces[1:])
    assert type(prompt_cache) is StaticCache


def test_a_cache_first_seen_filled_is_recorded_from_there(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = DynamicCache(config=model.config)
    ids = prompt_ids(10)
    model(ids, past_key_values=cache)  # filled before the watch
    with kvlab.watch(model) as watch:
        model(prompt_ids(1, seed=3), past_key_values=cache)
    trace = watch.trace
    assert trace.meta["first_seen_tokens"] == 10
    attach = [e for e in trace.updates if e["op"] == "attach"]
    assert len(attach) == len(cache.layers) and {e["step"] for e in attach} == {0}
    assert {e["step"] for e in trace.updates if e["op"] == "kv"} == {1}
    assert trace.final_layers()[0]["logical_length"] == 11


def test_a_bare_forward_creates_its_cache_inside_and_is_seen(tiny, prompt_ids):
    model = tiny("tiny-llama")
    with kvlab.watch(model) as watch:
        out = model(prompt_ids(5), use_cache=True)
    assert type(_compat.output_cache(out)) is DynamicCache
    assert watch.trace.meta["first_seen_tokens"] == 5


def test_crop_and_past_recording_are_recorded(tiny, prompt_ids):
    model = tiny("tiny-gemma3")  # sliding window 8
    cache = DynamicCache(config=model.config)
    cache.activate_past_recording()
    with kvlab.watch(model) as watch:
        generate(model, prompt_ids(12), past_key_values=cache)
        cache.crop(-3)
    trace = watch.trace
    assert [c["n"] for c in trace.crops] == [-3]
    assert trace.crops[0]["past_recording"] is True
    assert trace.final_layers()[0]["logical_length"] == cache.get_seq_length() == 12 + 8 - 1 - 3
    assert trace.summary()["final_bytes"] == storage_bytes(*kv_tensors(cache))


def test_nested_watches_share_one_trace_and_two_models_stay_apart(tiny, prompt_ids):
    llama, gemma = tiny("tiny-llama"), tiny("tiny-gemma3")
    with kvlab.watch(llama) as outer:
        with kvlab.watch(llama) as inner, kvlab.watch(gemma) as other:
            generate(llama, prompt_ids(6))
            generate(gemma, prompt_ids(6))
        assert isinstance(inner.caches[0], kvlab.InstrumentedDynamicCache)  # still the outer watch's
    assert outer.traces[0] is inner.traces[0]
    assert len(outer.traces) == 1 and len(other.traces) == 1
    assert other.trace.meta["layer_kinds"] != outer.trace.meta["layer_kinds"]
    assert_released(llama)
    assert type(outer.caches[0]) is DynamicCache


def test_kvlab_caches_are_listed_not_switched_back(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = kvlab.make_cache("dynamic", model.config)
    with kvlab.watch(model) as watch:
        generate(model, prompt_ids(6), past_key_values=cache)
    assert watch.trace is cache.trace
    assert isinstance(cache, kvlab.InstrumentedDynamicCache)


def test_offloaded_runs_on_cpu_inside_a_watch(tiny, prompt_ids):
    """transformers' own offloaded cache raises on a CPU-only torch; its instrumented twin skips the CUDA handshake."""
    model = tiny("tiny-gemma3")
    ids = prompt_ids(10)
    dynamic_seq, dynamic_logits = generate(model, ids, cache_implementation="dynamic")
    with kvlab.watch(model) as watch:
        seq, logits = generate(model, ids, cache_implementation="offloaded")
    assert torch.equal(seq, dynamic_seq)
    torch.testing.assert_close(logits, dynamic_logits, rtol=0, atol=0)
    assert watch.trace.meta["cache_kind"] == "offloaded"
    assert watch.trace.summary()["transfers"] > 0
    assert not [layer for layer in watch.caches[0].layers if "TransferRecording" in type(layer).__name__]


def test_quantized_cache_goes_back_with_its_own_layers(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = QuantizedCache("hqq", model.config, nbits=4, axis_key=1, axis_value=1, q_group_size=16, residual_length=4)
    with kvlab.watch(model) as watch:
        generate(model, prompt_ids(9), past_key_values=cache)
    assert watch.trace.meta["options"] == {"backend": "hqq"}
    assert watch.trace.summary()["flushes"] > 0
    assert type(cache) is QuantizedCache
    assert {type(layer).__name__ for layer in cache.layers} == {"HQQQuantizedLayer"}


def test_no_cache_gives_a_clear_error(tiny, prompt_ids, capsys):
    model = tiny("tiny-llama")
    with kvlab.watch(model) as watch:
        generate(model, prompt_ids(4), use_cache=False)
    assert watch.traces == [] and watch.meta == {"forwards": 8, "no_cache": True, "model_type": "llama"}
    assert "kvlab:" not in capsys.readouterr().err  # asked for: no warning line (notebooks show this block)
    with pytest.raises(kvlab.NoCacheSeenError, match="8 forwards of llama and no transformers Cache"):
        _ = watch.trace


def test_no_forward_at_all_says_so(tiny):
    with kvlab.watch(tiny("tiny-llama")) as watch:
        pass
    assert watch.meta == {"forwards": 0, "no_cache": False}
    with pytest.raises(kvlab.NoCacheSeenError, match="no forward ran"):
        _ = watch.trace


# -- models whose layers keep more than keys and values, and models that keep no transformers Cache ----------------
# Tiny random models built from transformers' own configs (4 layers or fewer, hidden 64, vocab 128), offline.
TINY = {"num_hidden_layers": 4, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 128}
BEYOND_KEYS_AND_VALUES = {  # model type -> its config beyond TINY
    # compressed-KV layers (DeepseekV4HCACache/CSACache): a sliding window of K=V plus compressor buffers, dicts
    "deepseek_v4": dict(
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        qk_rope_head_dim=8,
        q_lora_rank=32,
        o_lora_rank=32,
        o_groups=2,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        index_n_heads=2,
        index_head_dim=16,
        index_topk=8,
        sliding_window=8,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        hc_mult=2,
        num_nextn_predict_layers=0,
    ),
    # DynamicIndexedLayer: MLA's latent and rope key, plus indexer keys written after the cache update
    "hy_v4": dict(
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        index_n_heads=2,
        index_head_dim=16,
        index_topk=8,
        hc_mult=2,
    ),
    # LinearAttentionAndFullAttentionLayer: Mamba state and full-attention keys and values in one layer
    "zamba": dict(
        num_attention_heads=4,
        num_key_value_heads=4,
        mamba_d_state=8,
        layers_block_type=["linear_attention", "hybrid", "linear_attention", "hybrid"],  # two share weights
    ),
    # LinearAttentionAndSlidingWindowAttentionLayer: a conv state and a sliding window of keys and values
    "inkling_text": dict(
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        swa_num_attention_heads=4,
        swa_num_key_value_heads=2,
        swa_head_dim=16,
        sliding_window_size=8,
        d_rel=4,
        rel_extent=16,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
    ),
}
NO_CACHE = {  # model type -> its tiny config: models that keep their own past (MPT's tuples) or none (GPT-1)
    "mpt": dict(n_layers=2, d_model=64, n_heads=4, max_seq_len=64, vocab_size=128),
    "openai-gpt": dict(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=128),
}


def tiny_of(model_type: str, **config):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config)).eval()


def tensors_in(value):
    """Every tensor inside `value` (a tensor, or dicts, lists and tuples of them), the test's own walk."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)


def storage_held(cache) -> int:
    """What a cache keeps, counted independently of kvlab: the storage behind every tensor any layer attribute
    reaches, once per layer, but integer scalars (a layer's token counters, not cached data)."""
    total = 0
    for layer in cache.layers:
        storages = {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for value in vars(layer).values()
            for t in tensors_in(value)
            if t.dim() > 0 or t.is_floating_point()
        }
        total += sum(storages.values())
    return total


@pytest.mark.parametrize("model_type", BEYOND_KEYS_AND_VALUES)
def test_every_byte_a_layer_keeps_is_traced(model_type, prompt_ids):
    model = tiny_of(model_type, **{**TINY, **BEYOND_KEYS_AND_VALUES[model_type]})
    ids = prompt_ids(10)
    plain, _ = generate(model, ids)
    with kvlab.watch(model) as watch:
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            min_new_tokens=8,
            do_sample=False,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
    assert torch.equal(out.sequences, plain)
    cache = _compat.output_cache(out)
    held = storage_held(cache)
    final = watch.trace.final_layers()
    assert sum(e["bytes_held"] for e in final) == held == watch.trace.updates[-1]["cache_bytes"]
    keys_and_values = [getattr(layer, name, None) for layer in cache.layers for name in ("keys", "values")]
    assert held > storage_bytes(keys_and_values)  # more than keys and values
    assert watch.meta["no_cache"] is False


@pytest.mark.parametrize("model_type", NO_CACHE)
def test_a_model_that_keeps_no_transformers_cache_gets_one_line(model_type, prompt_ids, capsys):
    model = tiny_of(model_type, **NO_CACHE[model_type])
    ids = prompt_ids(6)
    plain, _ = generate(model, ids)
    with kvlab.watch(model) as watch:
        seq, _ = generate(model, ids)
    assert torch.equal(seq, plain)
    assert watch.meta == {"forwards": 8, "no_cache": True, "model_type": model_type}
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kvlab:")]
    assert lines == [
        f"kvlab: kvlab.watch saw 8 forwards of {model_type} and no transformers Cache in use (the model keeps its "
        "own past, or none, or ran with use_cache=False): nothing was traced."
    ]
    assert all(trace.meta["no_cache"] and not trace.events for trace in watch.traces)  # a cache it never used


def test_guide_chat_loop_reuses_one_cache(smollm2):
    model, tokenizer = smollm2
    cache = DynamicCache(config=model.config)
    messages = []
    with kvlab.watch(model) as watch:
        for prompt in ["Hello, what's your name?", "What is 2 + 2?"]:
            messages.append({"role": "user", "content": prompt})
            inputs = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            out = model.generate(**inputs, do_sample=False, max_new_tokens=6, past_key_values=cache)
            completion = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
            messages.append({"role": "assistant", "content": completion})
    assert len(watch.traces) == 1
    prefills = [e["tokens_added"] for e in watch.trace.updates if e["layer_idx"] == 0 and e["tokens_added"] > 1]
    assert len(prefills) == 2 and prefills[1] < prefills[0] + 6  # the second turn prefills only what is new


def test_a_text_generation_pipeline_is_watched_token_for_token(smollm2):
    """transformers' `pipeline("text-generation")` calls generate itself: watching its model records that cache
    and changes nothing it returns."""
    from transformers import pipeline

    model, tokenizer = smollm2
    pipe = pipeline("text-generation", model=model, tokenizer=tokenizer)
    settings = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False}
    plain = pipe("The KV cache", **settings)
    with kvlab.watch(pipe.model) as watch:
        watched = pipe("The KV cache", **settings)
    assert watched == plain and pipe("The KV cache", **settings) == plain  # the same text, during and after
    prompt_tokens = len(tokenizer("The KV cache").input_ids)
    assert len(watch.traces) == 1 and watch.trace.meta["cache_class"] == "DynamicCache"
    assert watch.trace.summary()["steps"] == 5  # the prefill, then one per new token but the last
    assert {row["logical_length"] for row in watch.trace.layer_table()} == {prompt_tokens + 4}


def test_crop_on_a_linear_attention_cache_without_recording_gets_kvlab_s_refusal(tiny, prompt_ids):
    """Mamba layers cannot roll back without past recording: transformers raises from inside its layer loop, kvlab
    refuses first and names the option (`recurrent_states_to_keep`) that plain `activate_past_recording()` lacks."""
    model = tiny("tiny-mamba")
    plain = DynamicCache(config=model.config)
    model(prompt_ids(6), past_key_values=plain)
    with pytest.raises(RuntimeError, match="does not track past states"):
        plain.crop(-3)
    cache = DynamicCache(config=model.config)
    with kvlab.watch(model), pytest.raises(kvlab.CacheCropError) as ours:
        model(prompt_ids(6), past_key_values=cache)
        cache.crop(-3)
    with pytest.raises(kvlab.CacheCropError) as rule:
        crop_rules.check_linear_rollback(-3, 0, False, 0)
    assert str(ours.value) == str(rule.value)
