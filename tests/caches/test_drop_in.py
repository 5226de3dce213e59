"""Drop-in: an instrumented cache generates the same tokens and the same logits as the transformers class it
instruments — single prompts, left-padded batches, beam search — on tiny random-weight models.

transformers' offloaded caches cannot run on a CPU-only build, so kvlab's offloaded caches are compared with
the same cache without offloading (the schedule moves tensors, it must not change a single number)."""

import pytest
import torch
from transformers import DynamicCache, EncoderDecoderCache

from kvlab import make_cache

from .variants import VARIANTS, variants

PARAMS = [  # every variant, on each tiny model it is checked on
    pytest.param(variant, model, id=f"{variant.name}-{model}") for variant in VARIANTS for model in variant.models
]


@pytest.mark.parametrize("variant, model_name", PARAMS)
def test_same_tokens_and_logits_as_transformers(tiny, prompt_ids, greedy, variant, model_name):
    model = tiny(model_name)
    ids = prompt_ids(16)
    ours = variant.build(model.config)
    theirs = variant.reference(model.config)
    assert isinstance(ours, type(theirs))
    seq_a, logits_a = greedy(model, ids, ours, 12, logits=True)
    seq_b, logits_b = greedy(model, ids, theirs, 12, logits=True)
    assert torch.equal(seq_a, seq_b)
    torch.testing.assert_close(logits_a, logits_b, rtol=0, atol=0)
    assert ours.trace.summary()["steps"] == 12


@pytest.mark.parametrize("variant", variants("dynamic", "static", "q-quanto-int4"))
def test_left_padded_batch_and_beam_search(tiny, prompt_ids, greedy, variant):
    model = tiny("tiny-gemma3" if variant.kind != "quantized" else "tiny-llama")
    ids = prompt_ids(14, batch=2)
    mask = torch.ones_like(ids)
    ids[1, :5], mask[1, :5] = 0, 0  # second row left-padded by 5
    for extra in ({"attention_mask": mask}, {"attention_mask": mask, "num_beams": 2}):
        seq_a, logits_a = greedy(model, ids, variant.build(model.config), 12, logits=True, **extra)
        seq_b, logits_b = greedy(model, ids, variant.reference(model.config), 12, logits=True, **extra)
        assert torch.equal(seq_a, seq_b)
        torch.testing.assert_close(logits_a, logits_b, rtol=0, atol=0)


def test_encoder_decoder_self_grows_cross_stays_at_source_length(tiny, prompt_ids, greedy):
    model = tiny("tiny-bart")
    ids = prompt_ids(10)
    ours = make_cache("dynamic", model.config)
    theirs = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    assert isinstance(ours, EncoderDecoderCache)
    seq_a, logits_a = greedy(model, ids, ours, 8, logits=True)
    seq_b, logits_b = greedy(model, ids, theirs, 8, logits=True)
    assert torch.equal(seq_a, seq_b)
    torch.testing.assert_close(logits_a, logits_b, rtol=0, atol=0)
    table = ours.trace.layer_table()
    self_rows = [r for r in table if r["role"] == "self"]
    cross_rows = [r for r in table if r["role"] == "cross"]
    assert [r["logical_length"] for r in cross_rows] == [10, 10]  # the source length, written once
    assert {r["logical_length"] for r in self_rows} == {seq_a.shape[1] - 1}
    assert {e["step"] for e in ours.trace.updates if e["role"] == "cross"} == {0}


def test_linear_attention_state_is_constant_while_kv_grows(tiny, prompt_ids, greedy):
    mamba = make_cache("dynamic", tiny("tiny-mamba").config)
    greedy(tiny("tiny-mamba"), prompt_ids(8), mamba, 6)
    assert len(set(mamba.trace.bytes_by_step())) == 1 and mamba.trace.summary()["steps"] == 6
    assert {e["layer_kind"] for e in mamba.trace.updates} == {"linear"}
    jamba = make_cache("dynamic", tiny("tiny-jamba").config)
    greedy(tiny("tiny-jamba"), prompt_ids(8), jamba, 6)
    by_step = jamba.trace.bytes_by_step()
    assert by_step == sorted(by_step) and by_step[-1] > by_step[0]  # the attention layers grow
