import pytest

from kvlab.measure import quality


def test_token_agreement_counts_prefix_and_matches():
    assert quality.token_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == {
        "tokens": 4,
        "common_prefix": 2,
        "matches": 3,
        "agreement": 0.75,
    }
    assert quality.token_agreement([1, 2], [1, 2, 3])["common_prefix"] == 2


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
