import math

import pytest
import torch

import kvlab
from kvlab.measure import quality


def test_token_agreement_counts_prefix_and_matches():
    assert quality.token_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == {
        "tokens": 4,
        "common_prefix": 2,
        "matches": 3,
        "agreement": 0.75,
    }
    assert quality.token_agreement([1, 2], [1, 2, 3])["common_prefix"] == 2


def test_agreement_and_divergence():
    assert quality.token_agreement([1, 2, 3, 4], [1, 2, 9, 4])["agreement"] == 0.75
    assert quality.first_divergence([1, 2, 3], [1, 2, 9]) == 2
    assert quality.first_divergence([1, 2], [1, 2, 3]) is None


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_teacher_forcing_through_a_cache_matches_one_forward_without_cache(tiny, prompt_ids, name):
    """20 tokens on tiny-gemma3 cross its sliding window of 8: the cached path must still equal the reference."""
    model = tiny(name)
    ids = prompt_ids(20)
    reference = quality.teacher_forced_logits(model, ids, 6, None)
    cached = quality.teacher_forced_logits(model, ids, 6, kvlab.make_cache("dynamic", model.config))
    assert reference.shape == (14, model.config.vocab_size)
    assert torch.allclose(reference, cached, atol=1e-4)


def test_perplexity_and_kl():
    uniform = torch.full((4, 10), -math.log(10))
    assert quality.perplexity(uniform, torch.tensor([1, 2, 3, 4])) == pytest.approx(10)
    assert quality.kl_divergence(uniform, uniform) == pytest.approx(0, abs=1e-7)
    peaked = torch.log_softmax(torch.tensor([[5.0] + [0.0] * 9] * 4), dim=-1)
    assert quality.kl_divergence(uniform, peaked) > 0.1


def test_dynamic_cache_matches_no_cache_logits(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(24)
    reference = quality.teacher_forced(model, ids, 8, cache="none")
    dynamic = quality.teacher_forced(model, ids, 8, cache="dynamic")
    assert reference.log_probs.shape == (16, 128) and reference.trace is None
    result = quality.compare(reference, dynamic)
    assert result["kl_mean"] < 1e-5 and result["top1_agreement"] == 1.0
    assert result["perplexity"] == pytest.approx(result["reference_perplexity"], rel=1e-4)
    assert dynamic.trace.summary()["steps"] == 16  # prefill + one step per remaining token but the last


def test_two_bit_quantization_moves_the_logits_more_than_eight_bit(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(40)
    reference = quality.teacher_forced(model, ids, 32, cache="dynamic")
    kl = {}
    for nbits in (2, 8):
        run = quality.teacher_forced(
            model, ids, 32, cache="quantized", backend="hqq", nbits=nbits, q_group_size=16, residual_length=4
        )
        kl[nbits] = quality.compare(reference, run)["kl_mean"]
    assert kl[2] > kl[8] > 0


def test_compare_refuses_different_tokens_and_bad_prefill(tiny, prompt_ids):
    model = tiny("tiny-llama")
    a = quality.teacher_forced(model, prompt_ids(10, seed=1), 4)
    b = quality.teacher_forced(model, prompt_ids(10, seed=2), 4)
    with pytest.raises(ValueError, match="same tokens"):
        quality.compare(a, b)
    with pytest.raises(ValueError, match="prefill_tokens"):
        quality.teacher_forced(model, prompt_ids(10), 10)


def test_sweep_rows_report_bytes_ratios_and_quality(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(40)
    configs = {
        "hqq 2": {"backend": "hqq", "nbits": 2, "q_group_size": 16, "residual_length": 4},
        "fp8": {"backend": "fp8"},
    }
    rows, runs = quality.sweep(model, ids, 32, configs)
    assert [r["config"] for r in rows] == ["dynamic", "hqq 2", "fp8"] and set(runs) == {"dynamic", "hqq 2", "fp8"}
    dynamic, hqq, fp8 = rows
    assert dynamic["kl_mean"] == 0 and dynamic["memory_ratio_16bit"] == 2.0  # float32 is twice 16-bit
    assert hqq["packed_bytes"] + hqq["residual_bytes"] == hqq["cache_bytes"] < dynamic["cache_bytes"]
    assert hqq["packed_ratio_16bit"] < fp8["packed_ratio_16bit"] < 1
    assert fp8["residual_bytes"] == 0 and hqq["flushes"] > 0
