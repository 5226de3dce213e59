"""Time of every decode step of a greedy `generate`, per cache configuration: where in the decode the time goes
(a `QuantizedCache`'s flush steps, `flush_schedule`, quantize the whole cache again). A configuration is `generate`
keywords or a callable returning a fresh cache: a cache object would carry one repeat's tokens into the next.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from kvlab import _compat
from kvlab.i18n import C_, N_, _
from kvlab.measure.timing import DecodeClock, Timing, check_one_prompt, per_step, time_interleaved


def greedy_generate(model, input_ids: torch.Tensor, new_tokens: int, cache=None, **kwargs) -> torch.Tensor:
    """kvlab's one greedy `generate`: up to `new_tokens` tokens after `input_ids` (1, prompt) on the model's device,
    every prompt token attended, into `cache` (None: generate's own) with any further `generate` keywords."""
    if cache is not None:
        kwargs[_compat.CACHE_KWARG] = cache
    with torch.inference_mode():
        return model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False, max_new_tokens=new_tokens, **kwargs
        )


@dataclass
class StepTimes:
    label: str
    runs: list[list[float]]  # seconds of each decode step, one list per repeat (run order)
    steps: list[Timing]  # steps[i]: trace step `step_numbers[i]` over the repeats
    step_numbers: list[int]  # the trace step of each entry: 1 .. new_tokens - 1 (0, the prefill, is not a gap)
    decode: Timing  # seconds per decoded token, each repeat: from the first new token to the last, per step
    call: Timing  # the whole generate call, prefill included

    def per_step(self) -> list[tuple[float, float, float]]:
        """(median, q1, q3) seconds of each decode step over the repeats."""
        return per_step(self.runs)


def decode_step_times(
    model,
    input_ids: torch.Tensor,
    configs: dict[str, dict | Callable[[], object]],
    new_tokens: int = 24,
    repeats: int = 5,
    warmup: int = 1,
) -> dict[str, StepTimes]:
    """{label: StepTimes} for `new_tokens` greedy tokens after `input_ids` (1, prompt), every configuration run
    `repeats` times interleaved (after `warmup` untimed runs each)."""
    check_one_prompt(input_ids)
    if new_tokens < 2:
        raise ValueError(
            _("new_tokens must be at least 2 (step times are the gaps between new tokens); got {new_tokens}").format(
                new_tokens=new_tokens
            )
        )
    for label, config in configs.items():
        if not (isinstance(config, dict) or callable(config)):
            raise TypeError(
                _("{label}: a configuration is generate keywords (a dict) or a callable returning a cache").format(
                    label=label
                )
            )
        if isinstance(config, dict) and any(
            isinstance(config.get(k), _compat.Cache) for k in _compat.FORWARD_CACHE_KWARGS
        ):
            raise ValueError(
                _(
                    "{label}: pass a callable that builds the cache (e.g. lambda: QuantizedCache(...)), not a cache "
                    "object: every repeat needs a fresh one"
                ).format(label=label)
            )
    input_ids = input_ids.to(model.device)
    pending: dict[str, dict] = {}  # label -> the next call's keywords (its fresh cache and clock), set untimed
    clocks: dict[str, list[DecodeClock]] = {label: [] for label in configs}

    def prepare(label: str) -> None:
        config = configs[label]
        # generate may keep or change a cache_config dict it is given: every call gets its own copy
        kwargs = copy.deepcopy(config) if isinstance(config, dict) else {_compat.CACHE_KWARG: config()}
        clock = DecodeClock()
        clocks[label].append(clock)
        pending[label] = kwargs | {"streamer": clock}

    def run(label: str) -> object:
        return greedy_generate(model, input_ids, new_tokens, min_new_tokens=new_tokens, **pending.pop(label))

    calls = time_interleaved({label: partial(run, label) for label in configs}, repeats, warmup, before_each=prepare)
    results = {}
    for label in configs:
        timed = clocks[label][warmup:]  # warm-ups run first, label by label, before the interleaved repeats
        runs = [clock.step_seconds for clock in timed]
        for r in runs:
            if len(r) != new_tokens - 1:
                raise RuntimeError(
                    _("{label}: {got} new tokens instead of {new_tokens}").format(
                        label=label, got=len(r) + 1, new_tokens=new_tokens
                    )
                )
        step_numbers = list(range(1, new_tokens))
        steps = [Timing(f"{label} step {s}", [r[i] for r in runs]) for i, s in enumerate(step_numbers)]
        decode = Timing(label, [sum(r) / len(r) for r in runs])
        results[label] = StepTimes(label, runs, steps, step_numbers, decode, Timing(label, calls[label].times))
    return results


def split_steps(result: StepTimes, steps, names: tuple[str, str] = (N_("other steps"), N_("flush steps"))):
    """(the other steps, the given steps) of `result` as two Timings, every repeat's times pooled, for
    `compare(others, chosen)`."""
    chosen = set(steps)
    missing = chosen - set(result.step_numbers)
    if missing:
        raise ValueError(
            _("{label}: steps {missing} were not timed (timed: {step_numbers})").format(
                label=result.label, missing=sorted(missing), step_numbers=result.step_numbers
            )
        )
    if not chosen or chosen == set(result.step_numbers):
        raise ValueError(
            _("{label}: split_steps needs steps on both sides; got {chosen}").format(
                label=result.label, chosen=sorted(chosen)
            )
        )
    pooled = {True: [], False: []}
    for step, timing in zip(result.step_numbers, result.steps):
        pooled[step in chosen].extend(timing.times)
    others, picked = (_(name) for name in names)  # the reader's words: the Timings' labels are printed
    # "hqq 4 bits flush steps"; in Portuguese "passos de flush (hqq 4 bits)", the steps first, as a native says it
    named = C_("steps of a configuration", "{label} {steps}")
    return (
        Timing(named.format(label=result.label, steps=others), pooled[False]),
        Timing(named.format(label=result.label, steps=picked), pooled[True]),
    )


def flush_schedule(residual_length: int, new_tokens: int) -> list[int]:
    """The decode steps (1 .. new_tokens - 1) at which transformers' `QuantizedLayer` flushes: the prefill leaves
    the residual empty, and the step that would bring it to `residual_length` quantizes everything instead."""
    if residual_length < 1:
        raise ValueError(
            _("residual_length must be at least 1; got {residual_length}").format(residual_length=residual_length)
        )
    steps, residual = [], 0
    for step in range(1, new_tokens):
        if residual + 1 >= residual_length:
            steps.append(step)
            residual = 0
        else:
            residual += 1
    return steps


def flush_steps(trace) -> list[int]:
    """The steps at which some layer of the traced cache flushed its residual."""
    return sorted({e["step"] for e in trace.flushes})


def quantize_steps(trace) -> list[int]:
    """The steps at which the traced cache quantized anything."""
    return [row["step"] for row in trace.work_by_step() if row["quantize_calls"]]
