"""Tolerances for the float32 results of `tests/measure/`, derived from the dtype and the size of the computation
(never a sign or an exact value of something that is zero in exact arithmetic).

- `forward_atol`: how far two float32 forwards of one model, summing in different orders (one forward over a
  window or one per token, a cache or none), may put a log-probability: each of the `layers` sums `hidden` terms,
  every term rounded to float32 eps relative, at the scale of the largest log-probability. A worst-case bound:
  measured differences on the tiny models are ~100x smaller.
- `kl_bound(d)`: the largest KL(p || q) two distributions can have when their log-probabilities differ by at most
  `d` everywhere (after renormalising, 2d): KL <= chi^2 = sum q (p/q - 1)^2 <= (e^2d - 1)^2.
- `kl_shift(d, spread)`: how far KL(p || q) moves when every log-probability of p and q moves by at most `d`
  (2d renormalised), where `spread` = max |log p - log q|: |sum (p' - p)(lp - lq)| + |sum p' (dlp - dlq)| <=
  (e^2d - 1) spread + 4d.
"""

from __future__ import annotations

import math

import torch

EPS32 = torch.finfo(torch.float32).eps


def forward_atol(config, log_probs: torch.Tensor) -> float:
    return config.num_hidden_layers * config.hidden_size * EPS32 * float(log_probs.abs().max())


def storage_atol(log_probs: torch.Tensor) -> float:
    """One float32 rounding of the largest log-probability (how `log_softmax_float32` stores them)."""
    return EPS32 * float(log_probs.abs().max())


def kl_bound(d: float) -> float:
    return math.expm1(2 * d) ** 2


def kl_shift(d: float, spread: float) -> float:
    return math.expm1(2 * d) * spread + 4 * d


def spread(p: torch.Tensor, q: torch.Tensor) -> float:
    """max |log p - log q| over every position and token."""
    return float((p.double() - q.double()).abs().max())
