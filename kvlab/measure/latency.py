"""Time per new token against its position, with and without a KV cache, and the work behind each. The loop is
plain greedy decoding, one forward per token, so each token is timed on its own (`generate` times only the total).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.i18n import _
from kvlab.measure.timing import Stopwatch, Timing, check_one_prompt, compare, interleaved, per_step


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

    def timing_at(self, index: int, label: str | None = None) -> Timing:
        """The repeats' times of token `index` as a `Timing`, for a ratio with its interval."""
        return Timing(label or f"token {index + 1}", [run[index] for run in self.runs])

    def timing_over(self, indices, label: str) -> Timing:
        """The times of tokens `indices` in every repeat, pooled: ten neighbouring tokens × 3 repeats are 30
        readings, enough for a ratio whose interval decides, where one token's 3 readings rarely do."""
        return Timing(label, [run[index] for run in self.runs for index in indices])


def prompt_growth(steps: dict[str, dict[int, Timing]]) -> list[str]:
    """`steps[label][prompt_tokens]`: the times of the decode steps of one `generate` call after a prompt that long.
    Per label measured at two or more lengths, the verdict of its longest prompt against its shortest, as
    "label: 128-token prompt is 3.10x slower than 16-token prompt (2.95-3.30)"."""
    lines = []
    for label, by_prompt in steps.items():
        if len(by_prompt) < 2:
            continue
        short, long = min(by_prompt), max(by_prompt)
        times = {tokens: Timing(_("{tokens}-token prompt").format(tokens=tokens), by_prompt[tokens].times)
                 for tokens in (short, long)}  # fmt: skip
        lines.append(f"{label}: {compare(times[short], times[long], warn=False).verdict()}")
    return lines


def token_times(
    model, input_ids: torch.Tensor, new_tokens: int, repeats: int = 3, modes: dict[str, bool] | None = None
) -> dict[str, TokenTimes]:
    """Greedy-decode `new_tokens` tokens after `input_ids` (1, prompt_tokens), timing every forward, in each mode
    ({label: use_cache}; the cache an instrumented DynamicCache), their repeats interleaved. The first token comes
    from the prefill in both modes; each token's time is the median over the repeats, q1 and q3 beside it."""
    check_one_prompt(input_ids)
    if new_tokens < 1:
        raise ValueError(_("new_tokens must be at least 1; got {new_tokens}").format(new_tokens=new_tokens))
    if repeats < 1:
        raise ValueError(_("repeats must be at least 1; got {repeats}").format(repeats=repeats))
    modes = modes if modes is not None else {"no cache": False, "DynamicCache": True}
    runs: dict[str, list] = {label: [] for label in modes}
    for _repeat, label in interleaved(list(modes), repeats):
        runs[label].append(_decode(model, input_ids.to(model.device), new_tokens, modes[label]))
    result = {}
    for label, repeated in runs.items():
        times = [seconds for seconds, *_ in repeated]
        median, q1, q3 = (list(column) for column in zip(*per_step(times)))
        _seconds, positions, token_ids, tokens_run = repeated[0]
        pairs = [run * position for run, position in zip(tokens_run, positions)]
        result[label] = TokenTimes(
            positions, median, token_ids, modes[label], q1, q3, tokens_run, pairs, repeats=repeats, runs=times
        )
    return result


def _decode(model, input_ids, new_tokens: int, use_cache: bool):
    kwargs = {"use_cache": False}
    if use_cache:
        kwargs = {_compat.CACHE_KWARG: make_cache("dynamic", model.config), "use_cache": True}
    sequence = run = input_ids  # (1, tokens so far), (1, tokens the next forward runs)
    seconds, positions, token_ids, tokens_run = [], [], [], []
    with torch.inference_mode():
        for _step in range(new_tokens):
            with Stopwatch() as watch:
                logits = model(run, **kwargs).logits  # (1, seq, vocab)
            seconds.append(watch.seconds)
            tokens_run.append(int(run.shape[-1]))
            positions.append(sequence.shape[-1])
            next_id = logits[0, -1].argmax().view(1, 1)  # (1, 1)
            token_ids.append(int(next_id))
            sequence = torch.cat([sequence, next_id], dim=-1)
            run = next_id if use_cache else sequence
    return seconds, positions, token_ids, tokens_run
