"""Quality of a cache kind on real text, by teacher forcing: the same tokens go through every cache.

A window of ids is split into a prefill (`prefill` tokens, one forward) and a continuation fed one token per
forward through the cache, exactly like decoding, but with the true next token instead of the model's own.
The logits at each continuation position then compare cache kinds on identical inputs:
perplexity on the true tokens, and KL(reference || cache) against the dynamic cache's logits.
"""

from __future__ import annotations

import math
import time

import torch

from kvlab import _compat


@torch.inference_mode()
def teacher_forced_logits(model, ids: torch.Tensor, prefill: int, cache, timing: dict | None = None) -> torch.Tensor:
    """Log-probabilities predicting ids[prefill:], shape (len - prefill, vocab); `cache=None` = no cache.

    With a cache: one prefill forward, then one forward per token. Without: one forward over the whole window
    (the exact reference: every position attends to every earlier token, nothing is stored). When `timing` is
    given, `timing["decode_seconds"]` receives the wall time of the one-token forwards (not the prefill).
    """
    ids = ids.to(model.device)  # (1, length)
    if cache is None:
        logits = model(ids, use_cache=False).logits[0, prefill - 1 : -1]  # (length - prefill, vocab)
        return torch.log_softmax(logits.float(), dim=-1)
    steps = [model(ids[:, :prefill], **{_compat.CACHE_KWARG: cache}, use_cache=True).logits[0, -1]]
    started = time.perf_counter()
    for t in range(prefill, ids.shape[-1] - 1):
        out = model(ids[:, t : t + 1], **{_compat.CACHE_KWARG: cache}, use_cache=True)
        steps.append(out.logits[0, -1])
    if timing is not None:
        timing["decode_seconds"] = time.perf_counter() - started
    return torch.log_softmax(torch.stack(steps).float(), dim=-1)  # (length - prefill, vocab)


def perplexity(log_probs: torch.Tensor, targets: torch.Tensor) -> float:
    """exp(mean negative log-likelihood) of `targets` (n,) under `log_probs` (n, vocab)."""
    nll = -log_probs.gather(-1, targets.view(-1, 1)).mean()
    return math.exp(float(nll))


def kl_divergence(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Mean over positions of KL(reference || other), both log-probabilities (n, vocab), in nats."""
    return float(torch.sum(reference.exp() * (reference - other), dim=-1).mean().clamp(min=0.0))


def token_agreement(reference: list[int], other: list[int]) -> float:
    """Fraction of greedy positions where two generations chose the same token."""
    n = min(len(reference), len(other))
    if n == 0:
        return float("nan")
    return sum(a == b for a, b in zip(reference[:n], other[:n])) / n


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first differing token, None if the shorter one is a prefix of the other."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None
