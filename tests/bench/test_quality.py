import math

import pytest
import torch

import kvlab
from kvlab.bench.quality import first_divergence, kl_divergence, perplexity, teacher_forced_logits, token_agreement


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_teacher_forcing_through_a_cache_matches_one_forward_without_cache(tiny, prompt_ids, name):
    """20 tokens on tiny-gemma3 cross its sliding window of 8: the cached path must still equal the reference."""
    model = tiny(name)
    ids = prompt_ids(20)
    reference = teacher_forced_logits(model, ids, 6, None)
    cached = teacher_forced_logits(model, ids, 6, kvlab.make_cache("dynamic", model.config))
    assert reference.shape == (14, model.config.vocab_size)
    assert torch.allclose(reference, cached, atol=1e-4)


def test_perplexity_and_kl():
    uniform = torch.full((4, 10), -math.log(10))
    assert perplexity(uniform, torch.tensor([1, 2, 3, 4])) == pytest.approx(10)
    assert kl_divergence(uniform, uniform) == pytest.approx(0, abs=1e-7)
    peaked = torch.log_softmax(torch.tensor([[5.0] + [0.0] * 9] * 4), dim=-1)
    assert kl_divergence(uniform, peaked) > 0.1


def test_agreement_and_divergence():
    assert token_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == 0.75
    assert first_divergence([1, 2, 3], [1, 2, 9]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) is None
