"""Time per new token against its position, with and without a KV cache, and the work behind each.

Without a cache, producing token t means running the model over all t tokens again: each forward runs t
tokens, and its attention scores t x t query-key pairs per layer, so the work per token grows with t and the
total with its square. With a cache, each step runs one token against the t stored keys: one token, t pairs.
The loop here is plain greedy decoding, one forward per token, so each token's time is measured on its own
(`generate` only reports the total); runs are repeated and interleaved (`kvlab.measure.timing`), and each
token's time is the median over the repeats with its interquartile range.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.measure.timing import Stopwatch, interleaved, per_step


@dataclass
class TokenTimes:
    positions: list[int]  # context length the model attended to when producing each token
    seconds: list[float]  # wall time of the forward pass that produced each token (median over repeats)
    token_ids: list[int]  # the greedy tokens (identical with and without cache)
    use_cache: bool
    q1: list[float] = field(default_factory=list)  # per token: first and third quartile over repeats
    q3: list[float] = field(default_factory=list)
    tokens_run: list[int] = field(default_factory=list)  # tokens each forward ran through the model (exact)
    pairs_scored: list[int] = field(default_factory=list)  # query-key pairs each forward scored, per layer (exact)
    repeats: int = 1
    runs: list[list[float]] = field(default_factory=list)  # every repeat's seconds per token, in run order

    def timing_at(self, index: int, label: str | None = None):
        """The repeats' times of token `index` as a `Timing`, for a ratio with its interval."""
        from kvlab.measure.timing import Timing

        return Timing(label or f"token {index + 1}", [run[index] for run in self.runs])

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds)


def time_per_token(
    model, input_ids: torch.Tensor, new_tokens: int, use_cache: bool = True, repeats: int = 1
) -> TokenTimes:
    """Greedy-decode `new_tokens` tokens after `input_ids` (1, prompt_tokens), timing every forward pass.

    The first token comes from the prefill in both modes. With `use_cache`, later forwards get one token and
    an instrumented DynamicCache; without, they get the whole sequence so far. With `repeats` > 1 the
    decoding runs that many times and each token's time is the median (q1 and q3 beside it).
    """
    label = "cache" if use_cache else "no cache"
    return token_times(model, input_ids, new_tokens, repeats=repeats, modes={label: use_cache})[label]


def token_times(
    model, input_ids: torch.Tensor, new_tokens: int, repeats: int = 3, modes: dict[str, bool] | None = None
) -> dict[str, TokenTimes]:
    """`time_per_token` for several modes ({label: use_cache}), their repeats interleaved: no cache, cache,
    no cache, cache, ... so that a busy moment of the machine lands on both alike."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape (1, prompt_tokens); got {tuple(input_ids.shape)}")
    if new_tokens < 1:
        raise ValueError(f"new_tokens must be at least 1; got {new_tokens}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}")
    modes = modes if modes is not None else {"no cache": False, "DynamicCache": True}
    runs: dict[str, list] = {label: [] for label in modes}
    for _, label in interleaved(list(modes), repeats):
        runs[label].append(_decode(model, input_ids.to(model.device), new_tokens, modes[label]))
    result = {}
    for label, repeated in runs.items():
        rows = per_step([seconds for seconds, *_ in repeated])
        _, positions, token_ids, tokens_run = repeated[0]
        pairs = [run * position for run, position in zip(tokens_run, positions)]
        result[label] = TokenTimes(
            positions,
            [r[0] for r in rows],
            token_ids,
            modes[label],
            q1=[r[1] for r in rows],
            q3=[r[2] for r in rows],
            tokens_run=tokens_run,
            pairs_scored=pairs,
            repeats=repeats,
            runs=[seconds for seconds, *_ in repeated],
        )
    return result


def _decode(model, input_ids, new_tokens: int, use_cache: bool):
    cache = make_cache("dynamic", model.config) if use_cache else None
    sequence = input_ids  # (1, tokens so far)
    step_input = input_ids
    seconds, positions, token_ids, tokens_run = [], [], [], []
    with torch.inference_mode():
        for _ in range(new_tokens):
            kwargs = {_compat.CACHE_KWARG: cache, "use_cache": True} if use_cache else {"use_cache": False}
            run = step_input if use_cache else sequence  # (1, tokens this forward runs)
            with Stopwatch() as watch:
                logits = model(run, **kwargs).logits  # (1, seq, vocab)
            seconds.append(watch.seconds)
            tokens_run.append(int(run.shape[-1]))
            positions.append(sequence.shape[-1])
            next_id = logits[0, -1].argmax().view(1, 1)  # (1, 1)
            token_ids.append(int(next_id))
            sequence = torch.cat([sequence, next_id], dim=-1)
            step_input = next_id
    return seconds, positions, token_ids, tokens_run
