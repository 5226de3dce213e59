"""`kvlab.generate` and `kvlab run` size and build caches exactly as transformers' `generate` does for the same
arguments: same tokens, bit-identical logits, the same bytes and slots, for every cache_implementation.

Each comparison runs on two twin models (seeded, identical weights) so that transformers' memory of the largest
static cache a model used (`_previous_max_cache_length`) is the same on both sides. transformers' offloaded caches
cannot run on a CPU-only torch, so kvlab's offloaded ones are compared with the same cache without offloading."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GenerationConfig

import kvlab
from kvlab.caches import CacheOptionError
from kvlab.cli import main
from kvlab.recording.layer_state import layer_kinds, read_layer

QUANTO = {"backend": "quanto", "nbits": 2, "q_group_size": 16, "residual_length": 4}
HQQ = {"backend": "hqq", "nbits": 4, "axis_key": 1, "axis_value": 1, "q_group_size": 16, "residual_length": 4}
KINDS = [  # (id, kvlab kind, cache_config, the transformers kind it must equal, model)
    ("dynamic", "dynamic", None, "dynamic", "tiny-gemma3"),
    ("static", "static", None, "static", "tiny-gemma3"),
    ("offloaded", "offloaded", None, "dynamic", "tiny-gemma3"),
    ("offloaded_static", "offloaded_static", None, "static", "tiny-gemma3"),
    ("quanto", "quantized", QUANTO, "quantized", "tiny-llama"),
    ("hqq", "quantized", HQQ, "quantized", "tiny-llama"),
    ("fp8", "quantized", {"backend": "fp8"}, "quantized", "tiny-llama"),
]
LENGTHS = [  # how the call says how long to generate (a 12-token prompt)
    ("max_new_tokens", lambda kind, config: {"max_new_tokens": 7}),
    ("max_length", lambda kind, config: {"max_length": 19}),
    (
        "generation_config",
        lambda kind, config: {
            "generation_config": GenerationConfig(
                max_new_tokens=7, cache_implementation=kind, cache_config=config, do_sample=False, pad_token_id=0
            )
        },
    ),
]
OUTPUT = {"return_dict_in_generate": True, "output_logits": True, "do_sample": False, "pad_token_id": 0}


def held(cache, config) -> tuple[int, int]:
    """(bytes, allocated slots) over every layer, read the same way from either side's cache."""
    kinds = layer_kinds(config)
    states = [read_layer(layer, kinds[i]) for i, layer in enumerate(cache.layers)]
    return sum(s.bytes_held for s in states), sum(s.slots_allocated for s in states)


def both(model_name, kind, config, reference, prompt, calls):
    """Run `calls` (functions (kind, cache_config) -> generate kwargs) on twin models: kvlab.generate with `kind`
    vs transformers' model.generate with `reference`, in the same order on each."""
    ours_model, theirs_model = kvlab.tiny_model(model_name), kvlab.tiny_model(model_name)
    results = []
    for call in calls:
        ours_kwargs, theirs_kwargs = call(kind, config), call(reference, config)
        if "generation_config" not in ours_kwargs:  # by name, as arguments
            ours_kwargs.update(cache_implementation=kind, cache_config=config)
            theirs_kwargs.update(cache_implementation=reference, cache_config=config)
        ours, cache = kvlab.generate(ours_model, prompt, **OUTPUT, **ours_kwargs)
        theirs = theirs_model.generate(prompt, **OUTPUT, **theirs_kwargs)
        results.append((ours, cache, theirs))
    return ours_model.config, results


@pytest.mark.parametrize("how, lengths", LENGTHS, ids=[h for h, _ in LENGTHS])
@pytest.mark.parametrize("kind, config, reference, model_name", [k[1:] for k in KINDS], ids=[k[0] for k in KINDS])
def test_same_tokens_logits_bytes_and_slots_as_transformers(
    prompt_ids, kind, config, reference, model_name, how, lengths
):
    prompt = prompt_ids(12)
    model_config, [(ours, cache, theirs)] = both(model_name, kind, config, reference, prompt, [lengths])
    assert torch.equal(ours.sequences, theirs.sequences) and ours.sequences.shape[1] == 19
    torch.testing.assert_close(torch.stack(ours.logits), torch.stack(theirs.logits), rtol=0, atol=0)
    assert ours.cache is cache and isinstance(cache, type(theirs.cache))  # the class it instruments
    assert held(cache, model_config) == held(theirs.cache, model_config)
    assert cache.trace.summary()["final_bytes"] == held(theirs.cache, model_config)[0]
    assert cache.trace.summary()["steps"] == 7
    if reference == "static":  # max_length - 1 slots: the last generated token is never cached
        assert max(layer.max_cache_len for layer in cache.layers) == 12 + 7 - 1


def test_static_sizes_follow_transformers_across_calls_beams_and_max_cache_len(prompt_ids):
    prompt = prompt_ids(10)
    calls = [
        {"max_new_tokens": 9},
        {"max_new_tokens": 3},  # a later, shorter call reuses the larger size
        {"max_new_tokens": 3, "max_cache_len": 40},  # a floor, not an exact size
        {"max_new_tokens": 4, "num_beams": 2, "num_return_sequences": 2},
    ]
    calls = [lambda kind, config, kwargs=kwargs: dict(kwargs) for kwargs in calls]
    config, results = both("tiny-gemma3", "static", None, "static", prompt, calls)
    sizes = []
    for ours, cache, theirs in results:
        assert torch.equal(ours.sequences, theirs.sequences)
        torch.testing.assert_close(torch.stack(ours.logits), torch.stack(theirs.logits), rtol=0, atol=0)
        assert held(cache, config) == held(theirs.cache, config)
        sizes.append((cache.layers[2].max_cache_len, cache.layers[2].keys.shape[0]))  # (slots, batch)
    assert sizes == [(18, 1), (18, 1), (40, 1), (40, 2)]


def test_smollm2_static_allocates_what_transformers_allocates(smollm2):
    # Before: kvlab sized a static cache prompt + max_new_tokens (27 slots, 2,488,320 B) where transformers
    # allocates max_length - 1 (26 slots, 2,396,160 B), and the logits differed by up to 4.2e-5.
    model, tokenizer = smollm2
    text = "The key-value cache of a transformer stores, for every layer, the keys and values of past tokens."
    ids = tokenizer(text, return_tensors="pt").input_ids[:, :21].repeat(2, 1)  # (2, 21): 21 + 6 - 1 = 26 slots
    kwargs = dict(max_new_tokens=6, **OUTPUT)
    with torch.inference_mode():
        ours, cache = kvlab.generate(model, ids, cache_implementation="static", **kwargs)
        theirs = model.generate(ids, cache_implementation="static", **kwargs)
    assert cache.trace.summary()["final_bytes"] == held(theirs.cache, model.config)[0] == 2_396_160
    torch.testing.assert_close(torch.stack(ours.logits), torch.stack(theirs.logits), rtol=0, atol=0)
    # with max_length instead of max_new_tokens this crashed (index_copy_(): index 17 is out of bounds)
    with torch.inference_mode():
        ours, cache = kvlab.generate(model, ids[:1, :12], cache_implementation="static", max_length=16, **OUTPUT)
        theirs = model.generate(ids[:1, :12], cache_implementation="static", max_length=16, **OUTPUT)
    torch.testing.assert_close(torch.stack(ours.logits), torch.stack(theirs.logits), rtol=0, atol=0)
    assert held(cache, model.config) == held(theirs.cache, model.config)


def test_kvlab_run_static_without_max_cache_len_is_sized_by_generate(smollm2, capsys):
    # Before: `kvlab run --cache static` without --max-cache-len was refused ("needs max_cache_len").
    model, tokenizer = smollm2
    prompt = "The cache holds"
    result = kvlab.run(model, tokenizer, prompt, cache="static", max_new_tokens=4)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        theirs = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            cache_implementation="static",
            max_new_tokens=4,
            do_sample=False,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id,
        )
    assert result.generated_token_ids == theirs.sequences[0, ids.shape[1] :].tolist()
    # this session's model may have run a larger static cache before: generate then keeps that size, both sides
    slots = theirs.cache.layers[0].max_cache_len
    assert slots >= ids.shape[1] + 4 - 1 and result.options == {"max_cache_len": slots}
    assert result.trace.summary()["final_bytes"] == held(theirs.cache, model.config)[0] == 2 * 30 * 3 * 64 * slots * 4
    # a freshly loaded model: exactly max_length - 1 slots
    assert (
        main(
            [
                *("run", "--model", "smollm2", "--cache", "static", "--prompt", prompt, "--no-chat-template"),
                "--max-new-tokens",
                "4",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    fresh = ids.shape[1] + 4 - 1
    assert (data["slots_allocated"], data["final_cache_bytes"]) == (30 * fresh, 2 * 30 * 3 * 64 * fresh * 4)
    assert data["options"] == {"max_cache_len": fresh} and data["generated_token_ids"] == result.generated_token_ids


def test_what_transformers_would_crash_on_is_refused_before_generation(prompt_ids):
    model = kvlab.tiny_model("tiny-llama")
    ids = prompt_ids(5)
    # quanto at axis 0 groups kv_heads x tokens x head_dim = 2 x 5 x 16 = 160 values: 64 does not divide them
    with pytest.raises(CacheOptionError, match=r"S=5 tokens \(the prompt\) that is 160, which 64 does not divide"):
        kvlab.generate(
            model, ids, cache_implementation="quantized", cache_config={"backend": "quanto"}, max_new_tokens=3
        )
    # ... but transformers' own route crashes there, after the prefill started
    with pytest.raises(ValueError, match="must be a divisor"):
        model.generate(
            ids,
            cache_implementation="quantized",
            cache_config={"backend": "quanto"},
            max_new_tokens=3,
            do_sample=False,
            pad_token_id=0,
        )
    assert (
        kvlab.generate(
            model,
            prompt_ids(8),
            cache_implementation="quantized",
            cache_config={"backend": "quanto"},
            max_new_tokens=3,
            do_sample=False,
            pad_token_id=0,
        )[1].trace.summary()["steps"]
        == 3
    )
    with pytest.raises(ValueError, match="the prompt is empty"):
        kvlab.generate(model, ids[:, :0], max_new_tokens=3)
