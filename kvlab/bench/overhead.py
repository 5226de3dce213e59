"""Instrumentation overhead, `kvlab bench --overhead`: plain `generate` inside `kvlab.watch` against the same call
outside, on the whole run (`whole_run_overhead`, the headline), then a breakdown replaying the run's cache calls
apart from the model (`recording_cost`: the instrumented cache and the watch, each against plain, where recording's
time goes); greedy tokens must be identical everywhere.

Why the whole run and not a replay of the cache calls: kvlab's recording runs once per layer per decoded token,
right after a decoder layer's weights have swept the CPU caches, so its code and objects are cold there; replayed in
a loop apart from the model they are warm, and the replay saw less than half of the cost (issue 41). Only the
whole run measures what a user pays; the replay takes milliseconds, so dozens of interleaved repeats give it a tight
interval.

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
from types import SimpleNamespace

import torch

from kvlab import _compat
from kvlab.bench.configs import BenchConfig
from kvlab.bench.lockstep import lockstep, shared_weights_twin
from kvlab.bench.runner import BenchSettings, generate_once
from kvlab.caches.factory import make_cache
from kvlab.measure.text import token_windows
from kvlab.measure.timing import Stopwatch, Timing, clock, compare, interleaved, median, paired_ratio
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


ROUTES = ("plain", "instrumented", "watched")


def cache_calls(model, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's prefill keys and values of `ids` as the model computes them (one forward into a plain cache)."""
    cache = _compat.DynamicCache(config=model.config)
    with torch.inference_mode():
        model(ids, **{_compat.CACHE_KWARG: cache}, use_cache=True)
    # keys, values: (batch, kv_heads, prompt, head_dim) per layer
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def _replay(cache, hooks, prefill: list, new_tokens: int) -> float:
    """Seconds of the decode steps' updates (and hooks) into `cache`, after its untimed prefill."""
    for idx, (keys, values) in enumerate(prefill):
        cache.update(keys, values, idx)
    steps = [(keys[..., -1:, :], values[..., -1:, :]) for keys, values in prefill]  # (batch, kv_heads, 1, head_dim)
    before, after = hooks or (None, None)
    with torch.inference_mode(), Stopwatch() as clock:
        for _ in range(new_tokens):
            if before:
                before(cache)
            for idx, (keys, values) in enumerate(steps):
                cache.update(keys, values, idx)
            if after:
                after(cache)
    return clock.seconds


def _interleaved(routes: tuple[str, ...], replay, repeats: int) -> dict[str, list[float]]:
    """`replay(route)`'s seconds for every route, `repeats` rounds interleaved after a warm-up that is not counted."""
    for route in routes:
        replay(route)
    seconds: dict[str, list[float]] = {route: [] for route in routes}
    for _, route in interleaved(list(routes), repeats):
        seconds[route].append(replay(route))
    return seconds


def _watch_hooks(model, watching) -> tuple:
    """The watch's two forward hooks, called as a forward calls them: the cache under transformers' own keyword and
    output field."""
    return (
        lambda cache: watching._before_forward(model, (), {_compat.CACHE_KWARG: cache}),
        lambda cache: watching._after_forward(
            model, (), {_compat.CACHE_KWARG: cache}, SimpleNamespace(**{_compat.OUTPUT_CACHE_FIELDS[0]: cache})
        ),
    )


def recording_cost(model, ids: torch.Tensor, new_tokens: int, plain_step_s: float, repeats: int = 41) -> dict:
    """The extra seconds per decoded token of the instrumented and the watched route over plain, and that as a
    share of `plain_step_s` (the plain decode step's time), each with the 95 % interval of the replay ratio."""
    prefill = cache_calls(model, ids)
    with watch(model) as watching:
        build = {
            "plain": lambda: (_compat.DynamicCache(config=model.config), None),
            "instrumented": lambda: (make_cache("dynamic", model.config), None),
            "watched": lambda: (_compat.DynamicCache(config=model.config), _watch_hooks(model, watching)),
        }
        seconds = _interleaved(ROUTES, lambda route: _replay(*build[route](), prefill, new_tokens), repeats)
    timings = {route: Timing(route, times) for route, times in seconds.items()}
    plain = timings["plain"].median
    out = {"replays": repeats, "plain_replay_s": plain}
    for route in ROUTES[1:]:
        compared = compare(timings["plain"], timings[route], warn=False)
        per_token = [(r - 1) * plain / new_tokens for r in (compared.ratio, compared.low, compared.high)]
        out[f"{route}_extra_ms_per_token"] = per_token[0] * 1e3
        out[f"{route}_share"] = per_token[0] / plain_step_s
        out[f"{route}_share_interval"] = [per_token[1] / plain_step_s, per_token[2] / plain_step_s]
    return out


def recording_lines(cost: dict) -> list[str]:
    """One line per route: the extra time per token and its share of a plain decode step, with the interval."""
    lines = []
    for route in ROUTES[1:]:
        low, high = cost[f"{route}_share_interval"]
        lines.append(
            f"{route}: recording adds {cost[f'{route}_extra_ms_per_token']:.3f} ms per decoded token = "
            f"{cost[f'{route}_share']:.2%} of a plain decode step (95% interval {low:.2%} to {high:.2%}; the "
            f"run's cache calls replayed {cost['replays']} times, interleaved)"
        )
    return lines


STRATEGY_ROUTES = ("dynamic plain", "dynamic watched", "strategy plain", "strategy watched")


def strategy_recording_cost(model, ids: torch.Tensor, new_tokens: int, layer_class: type, repeats: int = 41) -> dict:
    """Watching a strategy (a user's `layer_class`, in `Cache(layer_class_to_replicate=...)`) against watching
    transformers' `DynamicCache`: the run's decode updates and the watch's two hooks replayed into plain caches of
    each, with and without the watch, interleaved. Recording's extra time is paired within each round (watched minus
    plain), so the strategy's own update cost cancels; the ratio strategy / dynamic of its medians has a bootstrap
    interval (`timing.compare`)."""
    prefill = cache_calls(model, ids)
    caches = {
        "dynamic": lambda: _compat.DynamicCache(config=model.config),
        "strategy": lambda: _compat.Cache(layer_class_to_replicate=layer_class),
    }
    with watch(model) as watching:
        hooks = {"plain": None, "watched": _watch_hooks(model, watching)}

        def replay(route: str) -> float:
            kind, how = route.split()
            return _replay(caches[kind](), hooks[how], prefill, new_tokens)

        seconds = _interleaved(STRATEGY_ROUTES, replay, repeats)
    extra = {
        kind: Timing(kind, [w - p for w, p in zip(seconds[f"{kind} watched"], seconds[f"{kind} plain"])])
        for kind in caches
    }
    compared = compare(extra["dynamic"], extra["strategy"], warn=False)
    updates = new_tokens * len(prefill)
    return {
        "strategy": layer_class.__name__,
        "replays": repeats,
        "updates_per_replay": updates,
        "recording_us_per_update": {kind: t.median / updates * 1e6 for kind, t in extra.items()},
        "recording_iqr_us_per_update": {kind: [q / updates * 1e6 for q in t.quartiles] for kind, t in extra.items()},
        "plain_us_per_update": {kind: Timing(kind, seconds[f"{kind} plain"]).median / updates * 1e6 for kind in caches},
        "ratio": compared.as_dict(),
    }


def strategy_line(cost: dict) -> str:
    """One line: what watching the strategy costs per update against watching a DynamicCache, with the verdict."""
    us, ratio = cost["recording_us_per_update"], cost["ratio"]
    return (
        f"watching {cost['strategy']}: {us['strategy']:.2f} µs per update vs {us['dynamic']:.2f} µs for a "
        f"DynamicCache ({cost['updates_per_replay']} updates and their hooks replayed {cost['replays']} times, "
        f"interleaved): {ratio['verdict']}"
    )


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
