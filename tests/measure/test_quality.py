import math

import pytest
import torch

import kvlab
from kvlab.measure import quality

from .float_bounds import forward_atol, kl_bound, kl_shift, spread, storage_atol


def test_token_agreement_counts_prefix_and_matches():
    same = {"tokens": 4, "common_prefix": 2, "matches": 3, "agreement": 0.75}
    assert quality.token_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == same
    assert quality.token_agreement([1, 2], [1, 2, 3])["common_prefix"] == 2
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
    torch.testing.assert_close(cached, reference, rtol=0, atol=forward_atol(model.config, reference))


def test_perplexity_and_kl():
    uniform = torch.full((4, 10), -math.log(10))
    assert quality.perplexity(uniform, torch.tensor([1, 2, 3, 4])) == pytest.approx(10, rel=10 * torch.finfo().eps)
    assert quality.kl_divergence(uniform, uniform) == 0.0  # one tensor both sides: every term is exp(p) * (p - p)
    peaked = torch.log_softmax(torch.tensor([[5.0] + [0.0] * 9] * 4), dim=-1)
    # KL(uniform || peaked) = -log 10 - mean(log q): q is e^5 / (e^5 + 9) once and 1 / (e^5 + 9) nine times
    exact = -math.log(10) + math.log(math.exp(5) + 9) - 5 / 10
    assert quality.kl_divergence(uniform, peaked) == pytest.approx(exact, abs=kl_shift(storage_atol(peaked), 5.0))


@pytest.mark.parametrize("scale", [1e-2, 1e-4, 1e-6])
def test_kl_of_float32_log_probs_is_never_negative_and_matches_float64(scale):
    """Near-identical distributions over 32,000 tokens: a KL summed in float32 reads up to ~1e-7 either way (below
    zero at 1e-4 and 1e-6, where the exact KL is ~5e-9 and ~5e-13); renormalised in float64 it is >= 0 and within
    what one float32 rounding of the stored log-probabilities can move it."""
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(8, 32_000, generator=generator)
    other = logits + scale * torch.randn(8, 32_000, generator=generator)
    exact_p, exact_q = torch.log_softmax(logits.double(), -1), torch.log_softmax(other.double(), -1)
    exact = (exact_p.exp() * (exact_p - exact_q)).sum(-1)  # (8,), float64 from the same float32 logits
    p, q = quality.log_softmax_float32(logits), quality.log_softmax_float32(other)
    kl = quality.kl_per_position(p, q)
    assert kl.dtype == torch.float64 and bool((kl >= 0).all())
    torch.testing.assert_close(kl, exact, rtol=0, atol=kl_shift(storage_atol(p), spread(p, q)))


def test_kl_ignores_a_token_the_reference_rules_out_and_refuses_other_shapes():
    reference = torch.log_softmax(torch.tensor([[0.0, 0.0, -math.inf]]), -1)
    other = torch.log_softmax(torch.tensor([[0.0, 0.0, 0.0]]), -1)
    assert quality.kl_divergence(reference, other) == pytest.approx(math.log(3 / 2), rel=10 * torch.finfo().eps)
    with pytest.raises(ValueError, match="one shape"):
        quality.kl_per_position(reference, other[:, :2])


def test_dynamic_cache_matches_no_cache_logits(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(24)
    reference = quality.teacher_forced(model, ids, 8, cache="none")
    dynamic = quality.teacher_forced(model, ids, 8, cache="dynamic")
    assert reference.log_probs.shape == (16, 128) and reference.trace is None
    result = quality.compare(reference, dynamic)
    atol = forward_atol(model.config, reference.log_probs)  # the two differ only in summation order
    assert spread(reference.log_probs, dynamic.log_probs) <= atol
    assert 0 <= result["kl_mean"] <= result["kl_max"] <= kl_bound(atol)
    top2 = reference.log_probs.topk(2, dim=-1).values  # no top-1 leads by less than 2 * atol: none can swap
    assert float((top2[:, 0] - top2[:, 1]).min()) > 2 * atol and result["top1_agreement"] == 1.0
    # log perplexity is a mean of log-probabilities, each within atol of the reference's
    assert math.log(result["perplexity"]) == pytest.approx(math.log(result["reference_perplexity"]), abs=atol)
    assert dynamic.trace.summary()["steps"] == 16  # prefill + one step per remaining token but the last


def test_two_bit_quantization_moves_the_logits_more_than_eight_bit(tiny, prompt_ids):
    """KLs on tiny-llama: ~1e-4 nats at 2 bits, ~1e-8 at 8 bits (a float32 sum used to read -6e-8 for it). The
    tolerance is what one float32 rounding of the stored log-probabilities can move a KL (~3e-6 here)."""
    model, ids = tiny("tiny-llama"), prompt_ids(40)
    reference = quality.teacher_forced(model, ids, 32, cache="dynamic")
    kl, tolerance = {}, {}
    for nbits in (2, 8):
        run = quality.teacher_forced(
            model, ids, 32, cache="quantized", backend="hqq", nbits=nbits, q_group_size=16, residual_length=4
        )
        kl[nbits] = quality.compare(reference, run)["kl_mean"]
        tolerance[nbits] = kl_shift(storage_atol(reference.log_probs), spread(reference.log_probs, run.log_probs))
    assert kl[2] > kl[8] + tolerance[2] + tolerance[8]
    assert 0 <= kl[8] <= tolerance[8]  # 8 bits move the distribution less than float32 storage resolves


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
    assert dynamic["kl_mean"] == 0.0  # the reference against itself, one tensor both sides: exactly 0
    assert dynamic["memory_ratio_16bit"] == 2.0  # a ratio of byte counts: float32 is twice 16-bit
    assert hqq["packed_bytes"] + hqq["residual_bytes"] == hqq["cache_bytes"] < dynamic["cache_bytes"]
    assert hqq["packed_ratio_16bit"] < fp8["packed_ratio_16bit"] < 1
    assert fp8["residual_bytes"] == 0 and hqq["flushes"] > 0
    named, named_runs = quality.sweep(model, ids, 32, {"fp8": configs["fp8"]}, chunked=True, reference_label="Dyn")
    assert [r["config"] for r in named] == ["Dyn", "fp8"] and set(named_runs) == {"Dyn", "fp8"}


# -- teacher forcing in two forwards (`teacher_forced_chunk`, `sweep(..., chunked=True)`) ---------------------
CHUNK_CONFIGS = {
    "hqq 2": {"backend": "hqq", "nbits": 2, "q_group_size": 16, "axis_key": 1, "axis_value": 1},
    "quanto 4": {"backend": "quanto", "nbits": 4, "q_group_size": 16},
    "fp8": {"backend": "fp8"},
}


@pytest.mark.parametrize("label", ["dynamic", *CHUNK_CONFIGS])
def test_one_chunk_predicts_what_decoding_token_by_token_predicts(tiny, prompt_ids, label):
    model, ids = tiny("tiny-llama"), prompt_ids(44)
    cache, options = ("dynamic", {}) if label == "dynamic" else ("quantized", CHUNK_CONFIGS[label])
    decoded = quality.teacher_forced(model, ids, 32, cache=cache, **options)
    chunked = quality.teacher_forced_chunk(model, ids, 32, cache=cache, **options)
    assert torch.equal(chunked.targets, decoded.targets) and chunked.log_probs.shape == (12, 128)
    atol = forward_atol(model.config, decoded.log_probs)  # the same sums, in another order
    torch.testing.assert_close(chunked.log_probs, decoded.log_probs, rtol=0, atol=atol)
    mine, theirs = chunked.trace.final_layers()[0], decoded.trace.final_layers()[0]
    for field in ("logical_length", "quantized_tokens", "residual_tokens", "packed_bytes", "residual_bytes"):
        assert mine.get(field) == theirs.get(field), field


def test_sweep_rows_match_the_token_by_token_sweep(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(44)
    chunked, chunked_runs = quality.sweep(model, ids, 32, CHUNK_CONFIGS, chunked=True)
    decoded, decoded_runs = quality.sweep(model, ids, 32, CHUNK_CONFIGS)
    assert [r["config"] for r in chunked] == ["dynamic", *CHUNK_CONFIGS]
    atol = forward_atol(model.config, decoded_runs["dynamic"].log_probs)
    for mine, theirs in zip(chunked, decoded):
        for field in ("cache_bytes", "packed_bytes", "residual_bytes", "memory_ratio_16bit", "packed_ratio_16bit"):
            assert mine[field] == theirs[field], (mine["config"], field)  # byte counts and their ratios
        label = mine["config"]
        run, reference = decoded_runs[label].log_probs, decoded_runs["dynamic"].log_probs
        torch.testing.assert_close(chunked_runs[label].log_probs, run, rtol=0, atol=atol)
        # a count of top-1 matches, equal because no top-1 leads by less than the 2 * atol two runs may move it
        top2 = torch.cat([run, reference]).topk(2, dim=-1).values
        assert float((top2[:, 0] - top2[:, 1]).min()) > 2 * atol, label
        assert mine["top1_agreement"] == theirs["top1_agreement"], label
        # both sides of the KL within atol of the token-by-token ones: the KL within kl_shift of it
        assert mine["kl_mean"] == pytest.approx(theirs["kl_mean"], abs=kl_shift(atol, spread(reference, run)))


def test_refuses_a_chunk_that_would_flush_the_residual_and_other_caches(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(40)
    with pytest.raises(ValueError, match="flush"):
        quality.teacher_forced_chunk(
            model, ids, 8, cache="quantized", backend="quanto", nbits=4, q_group_size=16, residual_length=16
        )
    quality.teacher_forced_chunk(model, ids, 8, cache="quantized", backend="fp8")  # no residual
    with pytest.raises(ValueError, match="'static'"):
        quality.teacher_forced_chunk(model, ids, 8, cache="static")
    with pytest.raises(ValueError, match="prefill_tokens"):
        quality.teacher_forced_chunk(model, ids, 40)


def test_per_position_shows_a_near_tie_flipped_and_the_target_shift_that_makes_the_perplexity():
    """Position 0: a clear winner, unchanged; position 1: a near tie (0.01 nats) that `other` flips."""
    reference_logits = torch.tensor([[4.0, 1.0, 0.0], [2.0, 1.99, 0.0]])
    other_logits = torch.tensor([[4.0, 1.0, 0.0], [1.99, 2.0, 0.0]])
    targets = torch.tensor([0, 1])
    reference = quality.TeacherForced(torch.log_softmax(reference_logits, -1), targets, None)
    other = quality.TeacherForced(torch.log_softmax(other_logits, -1), targets, None)
    rows = quality.per_position(reference, other)
    assert [r["same"] for r in rows] == [True, False] and rows[1]["pick"] == 1
    assert rows[1]["reference_top2"] == (0, 1) and rows[1]["margin"] == pytest.approx(0.01, abs=1e-5)
    assert rows[0]["kl"] == 0.0 and 0 < rows[1]["kl"] < 1e-4  # a flipped pick, and almost no KL
    assert rows[0]["target_shift"] == 0.0 and rows[1]["target_shift"] == pytest.approx(0.01, abs=1e-5)
    mean_shift = sum(r["target_shift"] for r in rows) / len(rows)
    assert other.perplexity == pytest.approx(reference.perplexity * math.exp(-mean_shift), rel=1e-6)
    with pytest.raises(ValueError):
        quality.per_position(reference, quality.TeacherForced(reference.log_probs, torch.tensor([1, 1]), None))
