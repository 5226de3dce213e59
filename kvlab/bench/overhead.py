"""Instrumentation overhead, `kvlab bench --overhead`: plain `generate` inside `kvlab.watch` against the same call
outside, on the whole run (`whole_run_overhead`, the headline), then a breakdown replaying the run's cache calls
apart from the model (`kvlab.bench.recording_cost`: the instrumented cache and the watch, each against plain);
greedy tokens must be identical everywhere.

Why the whole run and not a replay of the cache calls: kvlab's recording runs once per layer per decoded token,
right after a decoder layer's weights have swept the CPU caches, so its code and objects are cold there; replayed in
a loop apart from the model they are warm, and the replay saw less than half of the cost (issue 41). Only the
whole run measures what a user pays.

The runs come in pairs, and the two runs of a pair take turns token by token (`kvlab.bench.lockstep`): timed one
after the other, two whole runs on a shared virtual machine differ by more than 1 % as a core's speed drifts. The
side that starts alternates from pair to pair; the figure is the median of the pairwise ratios (watched / plain)
with a 95 % bootstrap interval.
Pairs are added until that interval is at most twice `RESOLUTION` wide, so that it tells 1 % apart, or until
`max_pairs` ran or `max_seconds` went by (a long run's pairs take minutes each); then the verdict says the machine
is too noisy now instead of giving one.
"""

from __future__ import annotations

import contextlib

import torch

from kvlab.bench.configs import BenchConfig
from kvlab.bench.lockstep import lockstep, shared_weights_twin
from kvlab.bench.recording_cost import recording_cost, recording_lines, strategy_line, strategy_recording_cost
from kvlab.bench.runner import BenchSettings, generate_once
from kvlab.measure.text import token_windows
from kvlab.measure.timing import clock, median, paired_ratio
from kvlab.watcher import watch

RESOLUTION = 0.01  # what the interval must tell apart: 1 % of the run
MIN_PAIRS = 5  # fewer ratios than this give a bootstrap interval narrower than the noise it hides
MAX_PAIRS = 41
MAX_SECONDS = 900.0  # no more pairs begin after this long: 16 + 512 tokens take about 40 s a pair on one thread


def whole_run_overhead(
    model,
    tokenizer,
    ids: torch.Tensor,
    new_tokens: int,
    min_pairs: int = MIN_PAIRS,
    max_pairs: int = MAX_PAIRS,
    max_seconds: float = MAX_SECONDS,
    watching: bool = True,
) -> dict:
    """Pairs of plain and watched greedy `generate` of `new_tokens` after `ids` (1, prompt), each pair in lockstep
    (`kvlab.bench.lockstep`), until the interval of watched / plain is at most 2 x `RESOLUTION` (1 %) wide (at least
    `max(min_pairs, MIN_PAIRS)` pairs) or `max_pairs` pairs ran or `max_seconds` went by. Both sides run
    transformers' own DynamicCache; the watched one is recorded.

    `watching=False` leaves the second side unwatched too: the instrument's floor, an A/A of the same pairing (the
    twin's modules against `model`'s) that must read 1 within its interval before a ratio near 1 % means anything.
    Two processes in lockstep, each with its own copy of the weights, did not (issue 41's note)."""
    plain = BenchConfig("plain", "dynamic", plain=True)
    twin = shared_weights_twin(model)  # the plain side's modules: the watch's hooks stay on `model`

    def run(watched: bool, turns=None) -> dict:
        if not watched:
            return generate_once(twin, tokenizer, plain, ids, new_tokens, clock=turns)
        with watch(model) if watching else contextlib.nullcontext():
            return generate_once(model, tokenizer, plain, ids, new_tokens, clock=turns)

    for watched in (False, True):  # warm-up, not counted
        run(watched)
    runs: dict[bool, list[dict]] = {False: [], True: []}
    least = max(min_pairs, MIN_PAIRS)
    ratio = low = high = float("nan")
    started = clock()
    while len(runs[False]) < max(max_pairs, least):
        if len(runs[False]) >= least and clock() - started > max_seconds:
            break
        pair = lockstep((lambda turns: run(False, turns), lambda turns: run(True, turns)), first=len(runs[False]) % 2)
        for watched, (result, turns) in zip((False, True), pair):  # each side's time: its own turns, the end included
            runs[watched].append(result | {"seconds": turns.seconds})
        if len(runs[False]) >= least:
            ratio, low, high = paired_ratio([r["seconds"] for r in runs[False]], [r["seconds"] for r in runs[True]])
            if high - low <= 2 * RESOLUTION:
                break
    pairs = len(runs[False])
    return {
        "watching": watching,
        "pairs": pairs,
        "plain_s": [r["seconds"] for r in runs[False]],
        "watched_s": [r["seconds"] for r in runs[True]],
        "plain_decode_tokens_per_s": median([r["decode_tokens_per_s"] for r in runs[False]]),
        "ratio": ratio,
        "interval": [low, high],
        "resolution": RESOLUTION,
        "resolved": high - low <= 2 * RESOLUTION,
        "same_tokens": all(r["tokens"] == runs[False][0]["tokens"] for r in runs[False] + runs[True]),
    }


def whole_run_line(result: dict) -> str:
    """The headline of `whole_run_overhead`: the ratio and its interval, or why the machine cannot give one now."""
    ratio, (low, high), pairs = result["ratio"], result["interval"], result["pairs"]
    sides = "watched / plain" if result["watching"] else "plain / plain, the instrument's floor"
    measured = f"{sides}, whole run in lockstep: {ratio:.4f}x (95% interval {low:.4f}-{high:.4f}, {pairs} pairs)"
    if not result["resolved"]:
        return f"cannot resolve {result['resolution']:.0%} on this machine now: {measured}; run it on a quieter one"
    if not result["watching"]:
        fair = low <= 1 <= high
        return f"{measured}: " + ("the pairing is fair" if fair else "the pairing is off: it favours one side")
    if low > 1 + result["resolution"]:
        return f"{measured}: watching costs more than {result['resolution']:.0%}"
    return f"{measured}: watching costs at most {high - 1:.1%}" if high > 1 else f"{measured}: no cost measured"


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
