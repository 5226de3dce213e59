"""Time per new token against its position, with and without a KV cache.

Without a cache, producing token t means running the model over all t tokens again: the time per token grows
with position and the total with its square. With a cache, each step runs one token against the stored keys
and values: the time per token stays nearly flat. The loop here is plain greedy decoding, one forward per
token, so each token's time is measured on its own (`generate` only reports the total).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.caches import make_cache


@dataclass
class TokenTimes:
    positions: list[int]  # context length the model attended to when producing each token
    seconds: list[float]  # wall time of the forward pass that produced each token
    token_ids: list[int]  # the greedy tokens (identical with and without cache)
    use_cache: bool

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds)


def time_per_token(model, input_ids: torch.Tensor, new_tokens: int, use_cache: bool = True) -> TokenTimes:
    """Greedy-decode `new_tokens` tokens after `input_ids` (1, prompt_tokens), timing every forward pass.

    The first token comes from the prefill in both modes. With `use_cache`, later forwards get one token and
    an instrumented DynamicCache; without, they get the whole sequence so far.
    """
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape (1, prompt_tokens); got {tuple(input_ids.shape)}")
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be at least 1; got {new_tokens}")
    cache = make_cache("dynamic", model.config) if use_cache else None
    input_ids = input_ids.to(model.device)
    sequence = input_ids  # (1, tokens so far)
    step_input = input_ids
    positions, seconds, token_ids = [], [], []
    with torch.inference_mode():
        for _ in range(new_tokens):
            kwargs = {_compat.CACHE_KWARG: cache, "use_cache": True} if use_cache else {"use_cache": False}
            started = time.perf_counter()
            logits = model(step_input if use_cache else sequence, **kwargs).logits  # (1, seq, vocab)
            seconds.append(time.perf_counter() - started)
            positions.append(sequence.shape[-1])
            next_id = logits[0, -1].argmax().view(1, 1)  # (1, 1)
            token_ids.append(int(next_id))
            sequence = torch.cat([sequence, next_id], dim=-1)
            step_input = next_id
    return TokenTimes(positions, seconds, token_ids, use_cache)
