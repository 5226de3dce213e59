"""The size calculator against live instrumented caches, to the byte.

Two ways of filling a live cache: real `generate` runs of both bundled models, and `cache.update` driven
directly with random states of each model's true shapes (same cache classes, same code paths, milliseconds),
which lets the test cover every backend, bit width and axis.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch

import kvlab
from kvlab.caches.options import CacheOptionError
from kvlab.quantized_backends import BACKENDS_BY_NAME
from kvlab.size import architecture, cache_size, from_config, from_config_file, known_architectures, size_rows
from kvlab.size.table import format_rows


def drive(cache, arch, prefill: int, steps: int, dtype: str = "float32", batch: int = 1, seed: int = 0):
    """Feed `cache` a prefill and `steps` one-token decode steps, layer by layer, like a model forward does."""
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps + 1):
        new = prefill if step == 0 else 1
        for layer_idx in range(len(arch.layer_kinds)):
            # (batch, kv_heads, new_tokens, head_dim)
            keys = torch.randn(batch, arch.kv_heads, new, arch.head_dim, generator=gen).to(getattr(torch, dtype))
            values = torch.randn(batch, arch.kv_heads, new, arch.head_dim, generator=gen).to(getattr(torch, dtype))
            cache.update(keys, values, layer_idx)
    return cache.trace.summary()


def assert_matches(summary: dict, size) -> None:
    assert (summary["final_bytes"], summary["peak_bytes"]) == (size.bytes, size.peak_bytes)


# -- real generate runs -----------------------------------------------------------------------------------------
SMOLLM2_RUNS = [
    ("dynamic", {}),
    ("static", {"max_cache_len": 40}),
    ("quantized", {"backend": "quanto", "nbits": 4, "residual_length": 2}),
    ("quantized", {"backend": "hqq", "nbits": 2, "axis_key": 1, "axis_value": 1, "residual_length": 3}),
    ("quantized", {"backend": "fp8"}),
]


@pytest.mark.real_model
@pytest.mark.parametrize("kind,options", SMOLLM2_RUNS, ids=[f"{k}-{o}" for k, o in SMOLLM2_RUNS])
def test_smollm2_generate_matches_calculator(smollm2, kind, options):
    model, tokenizer = smollm2
    prompt = torch.arange(100, 123).unsqueeze(0)  # (1, 23) ids
    result = kvlab.run(model, tokenizer, prompt, cache=kind, max_new_tokens=5, **options)
    new = len(result.generated_token_ids)
    size = cache_size(from_config(model.config), kind, 23 + new - 1, prefill=23, **options)
    assert_matches(result.trace.summary(), size)


@pytest.mark.real_model
@pytest.mark.parametrize("kind,options", [("dynamic", {}), ("static", {"max_cache_len": 560})])
def test_gemma3_generate_past_the_window_matches_calculator(gemma3, kind, options):
    """A 530-token prompt on 512-token sliding layers: the prefill concatenation outlives the window."""
    model, tokenizer = gemma3
    prompt = (torch.arange(530) % 5000 + 300).unsqueeze(0)  # (1, 530) ids
    result = kvlab.run(model, tokenizer, prompt, cache=kind, max_new_tokens=3, **options)
    held = 530 + len(result.generated_token_ids) - 1
    size = cache_size(from_config(model.config), kind, held, prefill=530, **options)
    assert_matches(result.trace.summary(), size)
    if kind == "dynamic":
        assert size.peak_bytes > size.bytes  # the prefill step held more than the window


# -- direct updates of each bundled model's true shapes ---------------------------------------------------------
# (prefill, decode steps, residual_length): odd lengths, several flushes, a residual left over
LENGTHS = [(5, 0, 4), (37, 9, 4)]


def _quantized_cases():
    for bits in BACKENDS_BY_NAME["hqq"].nbits:
        for axis in BACKENDS_BY_NAME["hqq"].axes:
            yield {"backend": "hqq", "nbits": bits, "axis_key": axis, "axis_value": axis}
    for bits in BACKENDS_BY_NAME["quanto"].nbits:
        yield {"backend": "quanto", "nbits": bits}
    yield {"backend": "fp8"}


def two_layers_of(name: str):
    """A 2-layer config with the head geometry of a bundled model: the byte rules are per layer, and
    quantizing 30 layers at every flush would take minutes here."""
    import transformers

    facts = json.loads((resources.files("kvlab") / "data/architectures.json").read_text())["models"][name]["config"]
    small = transformers.AutoConfig.for_model(**{**facts, "num_hidden_layers": 2})
    if getattr(small, "layer_types", None):
        small.layer_types = small.layer_types[:2]
    return from_config(small)


QUANTIZED_CASES = [(o, "float32") for o in _quantized_cases()] + [
    ({"backend": "hqq", "nbits": 4, "axis_key": 1, "axis_value": 0}, "bfloat16"),
    ({"backend": "quanto", "nbits": 2}, "bfloat16"),
    ({"backend": "fp8"}, "bfloat16"),
]


@pytest.mark.parametrize(
    "options,dtype", QUANTIZED_CASES, ids=["-".join(map(str, [*o.values(), d])) for o, d in QUANTIZED_CASES]
)
def test_quantized_packed_plus_residual_to_the_byte(options, dtype):
    arch = two_layers_of("smollm2")
    for prefill, steps, residual in LENGTHS:
        if options["backend"] != "fp8":
            options = {**options, "residual_length": residual}
        cache = kvlab.make_cache("quantized", arch.config, **options)
        summary = drive(cache, arch, prefill, steps, dtype)
        size = cache_size(arch, "quantized", prefill + steps, prefill=prefill, dtype=dtype, **options)
        assert_matches(summary, size)
        layer = cache.trace.final_layers()[0]
        assert layer["residual_bytes"] * len(arch.layer_kinds) == size.residual_bytes
        assert layer["packed_bytes"] * len(arch.layer_kinds) == size.packed_bytes


@pytest.mark.parametrize("backend", ["quanto", "hqq"])
def test_default_residual_length_flushes_after_128_decode_steps(backend):
    """Past transformers' default residual of 128 tokens."""
    arch = two_layers_of("smollm2")
    cache = kvlab.make_cache("quantized", arch.config, backend=backend)
    summary = drive(cache, arch, 3, 130)
    size = cache_size(arch, "quantized", 133, prefill=3, backend=backend)
    assert_matches(summary, size)
    assert size.residual_bytes > 0 and cache.trace.flushes


def test_quanto_axis_minus_one_fails_where_quanto_fails():
    arch = architecture("smollm2")
    options = {"backend": "quanto", "nbits": 4, "axis_key": -1, "axis_value": -1}
    with pytest.raises(ValueError, match="must be a divisor") as live:
        drive(kvlab.make_cache("quantized", arch.config, **options), arch, 5, 0)
    with pytest.raises(CacheOptionError, match="must be a divisor") as predicted:
        cache_size(arch, "quantized", 5, **options)
    assert str(live.value).split(": ")[-1] in str(predicted.value)
    # 3 heads x 64 tokens groups evenly: both work, and agree
    summary = drive(kvlab.make_cache("quantized", arch.config, **options), arch, 64, 0)
    assert_matches(summary, cache_size(arch, "quantized", 64, **options))


# gemma3's sliding layers (window 512): short, crossing the window while decoding, prefilled past it
LENGTHS_BY_MODEL = [("smollm2", 20, 3), ("smollm2", 700, 2), ("gemma3", 20, 3), ("gemma3", 505, 10), ("gemma3", 700, 2)]


KINDS = [
    ("dynamic", {}),
    ("offloaded", {}),
    ("static", {"max_cache_len": 700}),
    ("offloaded_static", {"max_cache_len": 300}),
]
# static caches must hold every token in their full-attention layers (both models have some)
CAP_CASES = [
    (name, prefill, steps, kind, options)
    for name, prefill, steps in LENGTHS_BY_MODEL
    for kind, options in KINDS
    if options.get("max_cache_len", prefill + steps) >= prefill + steps
]


@pytest.mark.parametrize("name,prefill,steps,kind,options", CAP_CASES)
def test_dynamic_static_and_sliding_caps_to_the_byte(name, prefill, steps, kind, options):
    arch = architecture(name)
    tokens = prefill + steps
    summary = drive(kvlab.make_cache(kind, arch.config, **options), arch, prefill, steps)
    assert_matches(summary, cache_size(arch, kind, tokens, prefill=prefill, **options))


def test_batch_and_bfloat16_scale_the_bytes():
    arch = architecture("gemma3")
    summary = drive(kvlab.make_cache("dynamic", arch.config), arch, 30, 3, dtype="bfloat16", batch=3)
    size = cache_size(arch, "dynamic", 33, prefill=30, batch=3, dtype="bfloat16")
    assert_matches(summary, size)
    assert size.bytes * 2 == cache_size(arch, "dynamic", 33, prefill=30, batch=3, dtype="float32").bytes


@pytest.mark.parametrize("name", ["tiny-bart", "tiny-mamba", "tiny-jamba"])
def test_encoder_decoder_and_linear_attention_match_live_caches(tiny, prompt_ids, name):
    model = tiny(name)
    result = kvlab.run(
        model, None, prompt_ids(9), cache="dynamic", max_new_tokens=4, generate_kwargs={"min_new_tokens": 4}
    )
    arch = from_config(model.config)
    if arch.is_encoder_decoder:  # the decoder starts from one decoder_start token; the encoder saw 9
        decoded = result.trace.final_layers()[0]["logical_length"]
        size = cache_size(arch, "dynamic", decoded, prefill=1, source_tokens=9)
    else:
        size = cache_size(arch, "dynamic", 9 + len(result.generated_token_ids) - 1, prefill=9)
    assert_matches(result.trace.summary(), size)


# -- the shipped architecture facts -----------------------------------------------------------------------------
@pytest.mark.real_model
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_shipped_facts_of_bundled_models_agree_with_their_real_configs(name, smollm2, gemma3):
    model = {"smollm2": smollm2, "gemma3": gemma3}[name][0]
    shipped, real = architecture(name), from_config(model.config)
    for field in ("layer_kinds", "kv_heads", "head_dim", "attention_heads", "sliding_window"):
        assert getattr(shipped, field) == getattr(real, field), field


def test_every_shipped_architecture_builds_and_names_its_source():
    names = known_architectures()
    for required in (
        "llama-2-7b",
        "llama-3-8b",
        "mistral-7b",
        "gemma-2-9b",
        "gemma-3-4b",
        "qwen3-0.6b",
        "qwen3-4b",
        "phi-3-mini",
        "smollm2",
        "gemma3",
    ):
        assert required in names
    for name in names:
        arch = architecture(name)
        assert "/" in arch.source and arch.layer_kinds
        assert cache_size(arch, "dynamic", 16).bytes > 0


def test_guide_example_llama2_7b_holds_half_a_mebibyte_per_token_in_fp16():
    size = cache_size(architecture("llama-2-7b"), "dynamic", 4096, dtype="float16")
    assert size.bytes == 2 * 32 * 32 * 128 * 2 * 4096  # K and V x layers x heads x head_dim x 2 bytes x tokens


def test_chunked_layers_are_capped_at_the_chunk_size():
    arch = architecture("llama-4-scout")
    assert arch.counts() == {"chunked": 36, "full": 12}
    long = cache_size(arch, "dynamic", 20000, prefill=10000, dtype="bfloat16")
    assert long.by_layer_kind["chunked"] == 36 * 2 * 8 * 8192 * 128 * 2  # chunk-1 kept + the newest token


def test_config_file_and_errors(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "hidden_size": 64,
            }
        )
    )
    arch = from_config_file(path)
    assert cache_size(arch, "dynamic", 10).bytes == 2 * 2 * 2 * 16 * 4 * 10
    with pytest.raises(ValueError, match="known: .*llama-2-7b"):
        architecture("nope")
    with pytest.raises(ValueError, match="valid: float32"):
        cache_size(arch, "dynamic", 10, dtype="int7")
    with pytest.raises(CacheOptionError, match="needs max_cache_len"):
        cache_size(arch, "static", 10)


def test_table_marks_quantized_unsupported_on_sliding_models():
    arch = architecture("gemma3")
    rows = size_rows(arch, 600, max_cache_len=1024)
    quantized = [r for r in rows if r["cache_kind"] == "quantized"]
    assert quantized and all("sliding" in r["unsupported"] for r in quantized)
    static = next(r for r in rows if r["cache_kind"] == "static")
    assert static["waste_bytes"] > 0
    assert "unsupported" in format_rows(arch, rows, 600)
