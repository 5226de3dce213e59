"""Instrumentation overhead, `kvlab bench --overhead`: plain `generate` inside `kvlab.watch` against the same call
outside, on the whole run (`kvlab.bench.whole_run`, the headline), then a breakdown replaying the run's cache calls
apart from the model (`kvlab.bench.recording_cost`: the instrumented cache and the watch, each against plain);
greedy tokens must be identical everywhere.
"""

from __future__ import annotations

import torch

from kvlab.bench.recording_cost import recording_cost, recording_lines, strategy_line, strategy_recording_cost
from kvlab.bench.runner import BenchSettings
from kvlab.bench.whole_run import MAX_PAIRS, MAX_SECONDS, whole_run_line, whole_run_overhead
from kvlab.measure.text import token_windows


def run_overhead(
    model,
    tokenizer,
    settings: BenchSettings,
    strategies: tuple[type, ...] = (),
    max_pairs: int = MAX_PAIRS,
    max_seconds: float = MAX_SECONDS,
) -> dict:
    """The whole-run ratio of watched to plain `generate` (at least `settings.repeats` pairs, more until the interval
    resolves 1 % or `max_pairs` ran or `max_seconds` went by), the replayed recording cost per decoded token, and
    with `strategies` (layer classes) what recording each costs against recording a `DynamicLayer`."""
    settings.check()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    ids = token_windows(tokenizer, settings.prompt_tokens, 1, settings.seed)[0].to(model.device)  # (1, prompt)
    whole = whole_run_overhead(
        model, tokenizer, ids, settings.new_tokens, settings.repeats, max_pairs, max_seconds=max_seconds
    )
    cost = recording_cost(model, ids, settings.new_tokens, plain_step_s=1 / whole["plain_decode_tokens_per_s"])
    mine = {"strategies": [strategy_recording_cost(model, ids, settings.new_tokens, s) for s in strategies]}
    return {
        "model": settings.model,
        "prompt_tokens": settings.prompt_tokens,
        "new_tokens": settings.new_tokens,
        "min_pairs": settings.repeats,
        "threads": torch.get_num_threads(),
        "device": str(model.device),
        "whole_run": whole,
        "same_tokens": whole["same_tokens"],
        "recording": cost,
        **(mine if strategies else {}),
    }


def overhead_lines(result: dict) -> list[str]:
    """The human report of `run_overhead`: the whole run first, then the replayed breakdown."""
    lines = [whole_run_line(result["whole_run"])]
    lines.extend(f"breakdown, {line}" for line in recording_lines(result["recording"]))
    lines.extend(strategy_line(cost) for cost in result.get("strategies", []))
    lines.append(f"same tokens: {result['same_tokens']}")
    return lines
