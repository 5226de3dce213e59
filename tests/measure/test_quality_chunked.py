import pytest
import torch

from kvlab.measure import quality, quality_chunked

from .float_bounds import forward_atol, kl_shift, spread

CONFIGS = {
    "hqq 2": {"backend": "hqq", "nbits": 2, "q_group_size": 16, "axis_key": 1, "axis_value": 1},
    "quanto 4": {"backend": "quanto", "nbits": 4, "q_group_size": 16},
    "fp8": {"backend": "fp8"},
}


@pytest.mark.parametrize("label", ["dynamic", *CONFIGS])
def test_one_chunk_predicts_what_decoding_token_by_token_predicts(tiny, prompt_ids, label):
    model, ids = tiny("tiny-llama"), prompt_ids(44)
    cache, options = ("dynamic", {}) if label == "dynamic" else ("quantized", CONFIGS[label])
    decoded = quality.teacher_forced(model, ids, 32, cache=cache, **options)
    chunked = quality_chunked.teacher_forced_chunk(model, ids, 32, cache=cache, **options)
    assert torch.equal(chunked.targets, decoded.targets) and chunked.log_probs.shape == (12, 128)
    atol = forward_atol(model.config, decoded.log_probs)  # the same sums, in another order
    torch.testing.assert_close(chunked.log_probs, decoded.log_probs, rtol=0, atol=atol)
    mine, theirs = chunked.trace.final_layers()[0], decoded.trace.final_layers()[0]
    for field in ("logical_length", "quantized_tokens", "residual_tokens", "packed_bytes", "residual_bytes"):
        assert mine.get(field) == theirs.get(field), field


def test_sweep_rows_match_the_token_by_token_sweep(tiny, prompt_ids):
    model, ids = tiny("tiny-llama"), prompt_ids(44)
    chunked, chunked_runs = quality_chunked.sweep(model, ids, 32, CONFIGS)
    decoded, decoded_runs = quality.sweep(model, ids, 32, CONFIGS)
    assert [r["config"] for r in chunked] == ["dynamic", *CONFIGS]
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
        quality_chunked.teacher_forced_chunk(
            model, ids, 8, cache="quantized", backend="quanto", nbits=4, q_group_size=16, residual_length=16
        )
    quality_chunked.teacher_forced_chunk(model, ids, 8, cache="quantized", backend="fp8")  # no residual
    with pytest.raises(ValueError, match="'static'"):
        quality_chunked.teacher_forced_chunk(model, ids, 8, cache="static")
    with pytest.raises(ValueError, match="prefill_tokens"):
        quality_chunked.teacher_forced_chunk(model, ids, 40)
