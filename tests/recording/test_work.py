"""The work counters of a trace, checked exactly against hand computation (tiny models, then SmolLM2).

tiny-llama: 3 full layers, 4 query heads, 2 KV heads, head_dim 16. One forward of q queries against s key
slots costs 2 * batch * 4 * q * s * (16 + 16) FLOPs per layer."""

from __future__ import annotations

import pytest
import torch
import transformers

import kvlab
from kvlab import _compat
from kvlab.recording.work import attention_work, input_signatures, no_work, work_by_step

PROMPT, NEW = 6, 4


def flops(batch, heads, queries, slots, head_dim):
    return 2 * batch * heads * queries * slots * (2 * head_dim)


def run(tiny, prompt_ids, cache_kind, batch=1, **options):
    model = tiny("tiny-llama")
    cache = kvlab.make_cache(cache_kind, model.config, **options)
    model.generate(
        prompt_ids(PROMPT, batch=batch),
        **{_compat.CACHE_KWARG: cache},
        max_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
    return cache.trace


def test_a_static_cache_attends_every_slot_masked_ones_included(tiny, prompt_ids):
    trace = run(tiny, prompt_ids, "static", max_cache_len=64)
    kv = [e for e in trace.updates if e["op"] == "kv"]
    assert {e["slots_attended"] for e in kv} == {64}  # prefill and every decode step: the whole allocation
    rows = work_by_step(trace)
    assert [r["tokens"] for r in rows] == [PROMPT, 1, 1, 1]  # the 4th new token needs no forward
    assert [r["slots_attended"] for r in rows] == [3 * 64] * 4
    assert [r["attention_flops"] for r in rows] == [3 * flops(1, 4, q, 64, 16) for q in (PROMPT, 1, 1, 1)]
    # masked slots x queries: the waste is counted per forward, not only as memory
    decode = [e for e in kv if e["step"] > 0]
    assert all(e["slots_attended"] - e["slots_live"] == 64 - e["logical_length"] for e in decode)


def test_a_dynamic_cache_attends_only_what_it_holds(tiny, prompt_ids):
    trace = run(tiny, prompt_ids, "dynamic", batch=2)
    rows = work_by_step(trace)
    assert [r["slots_attended"] for r in rows] == [3 * s for s in (6, 7, 8, 9)]
    assert [r["attention_flops"] for r in rows] == [
        3 * flops(2, 4, q, s, 16) for q, s in ((6, 6), (1, 7), (1, 8), (1, 9))
    ]


def test_input_signatures_static_keeps_one_decode_shape_dynamic_grows(tiny, prompt_ids):
    static = input_signatures(run(tiny, prompt_ids, "static", max_cache_len=64))
    assert static == [(1, PROMPT, (64, 64, 64)), (1, 1, (64, 64, 64))]
    dynamic = input_signatures(run(tiny, prompt_ids, "dynamic"))
    assert [s[2][0] for s in dynamic] == [6, 7, 8, 9]


def test_a_quantized_cache_counts_its_packing_calls(tiny, prompt_ids):
    trace = run(tiny, prompt_ids, "quantized", backend="quanto", nbits=4, q_group_size=16, residual_length=2)
    rows = work_by_step(trace)
    # transformers quantizes keys and values of the prompt at the prefill (2 calls per layer), dequantizes
    # both on every update, and re-quantizes (flushes) once the residual reaches residual_length
    assert rows[0]["quantize_calls"] == 3 * 2 and rows[0]["quantized_elements"] == 3 * 2 * 2 * PROMPT * 16
    assert all(r["dequantize_calls"] == 3 * 2 for r in rows[1:])
    flush_steps = {e["step"] for e in trace.flushes}
    assert flush_steps and all(rows[s]["quantize_calls"] == 3 * 2 for s in flush_steps)
    assert all(rows[s]["quantize_calls"] == 0 for s in range(1, len(rows)) if s not in flush_steps)


def test_offloading_bytes_moved_per_step(tiny, prompt_ids):
    trace = run(tiny, prompt_ids, "offloaded")
    rows = work_by_step(trace)
    moved = sum(e["bytes"] for e in trace.transfers if e["moved"])
    assert sum(r["offload_bytes"] + r["prefetch_bytes"] for r in rows) == moved
    # on a CPU-only machine nothing crosses a device boundary: the schedule runs, the bytes moved are 0
    if not torch.cuda.is_available():
        assert moved == 0


def test_updates_without_attention_count_no_work(tiny, prompt_ids):
    trace = run(tiny, prompt_ids, "dynamic")
    cache_free = [e for e in trace.updates if e["op"] != "kv"]
    assert all(e["attention_flops"] == 0 for e in cache_free)
    assert no_work(3) == {**dict.fromkeys(no_work(), 0), "queries": 3}


def test_attention_work_without_a_config_uses_the_kv_heads():
    keys = torch.zeros(1, 2, 10, 8)  # (batch, kv_heads, slots, head_dim)
    work = attention_work(torch.zeros(1, 2, 3, 8), (keys, keys), heads=0)
    assert work["attention_flops"] == 2 * 1 * 2 * 3 * 10 * 16 and work["slots_attended"] == 10


@pytest.mark.real_model
def test_smollm2_one_decode_step_by_hand(smollm2):
    """SmolLM2-135M: 30 layers, 9 query heads, head_dim 64. One decode step after a 6-token prompt with a
    StaticCache of 64 slots scores 1 query against 64 slots in each layer: 30 * 2 * 9 * 64 * 128 FLOPs."""
    model, tokenizer = smollm2
    cache = kvlab.make_cache("static", model.config, max_cache_len=64)
    ids = tokenizer("The KV cache holds", return_tensors="pt").input_ids[:, :6]
    model.generate(ids, **{_compat.CACHE_KWARG: cache}, max_new_tokens=2, do_sample=False)
    decode = work_by_step(cache.trace)[1]
    assert (decode["tokens"], decode["slots_attended"]) == (1, 30 * 64)
    assert decode["attention_flops"] == 30 * 2 * 9 * 1 * 64 * (64 + 64) == 4_423_680


@pytest.mark.skipif(
    "dots3_note_text" not in transformers.CONFIG_MAPPING, reason="this transformers has no dots3_note_text"
)
def test_a_heterogeneous_config_counts_each_layers_own_query_heads(prompt_ids):
    """dots3_note_text's layers may differ in their heads: transformers refuses the global `num_attention_heads`,
    so each layer's FLOPs take that layer's own count."""
    model = kvlab.tiny_model("dots3_note_text")
    text = model.config.get_text_config(decoder=True)
    heads = [layer.num_attention_heads for layer in text.per_layer_config]
    with kvlab.watch(model) as watch:
        out = model.generate(
            prompt_ids(PROMPT), max_new_tokens=1, do_sample=False, pad_token_id=0, return_dict_in_generate=True
        )
    layers = out.past_key_values.layers  # keys and values: (batch, kv_heads, slots, dim), the dims per layer
    prefill = [e for e in watch.trace.updates if e["op"] == "kv" and e["step"] == 0]
    assert len(set(heads)) > 1 and len(prefill) == len(heads)
    for e in prefill:
        dims = layers[e["layer_idx"]].keys.shape[-1] + layers[e["layer_idx"]].values.shape[-1]
        assert e["attention_flops"] == 2 * heads[e["layer_idx"]] * PROMPT * PROMPT * dims
