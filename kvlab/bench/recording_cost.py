"""What recording adds to a decode step, broken down: the run's cache calls (each layer's update and the watch's
two forward hooks) replayed apart from the model, the instrumented cache and the watch each against plain. It
takes milliseconds, so dozens of interleaved repeats give a tight interval; but in a loop kvlab's code and objects
stay in the CPU caches, which a real decode step sweeps between two updates, so the replay sees less than the run
pays. The headline is the whole run (`kvlab.bench.overhead`); this is where its cost goes.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from kvlab import _compat
from kvlab.caches.factory import make_cache
from kvlab.measure.timing import Stopwatch, Timing, compare, interleaved
from kvlab.watcher import watch

ROUTES = ("plain", "instrumented", "watched")


def cache_calls(model, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's prefill keys and values of `ids` as the model computes them (one forward into a plain cache)."""
    cache = _compat.DynamicCache(config=model.config)
    with torch.inference_mode():
        model(ids, **{_compat.CACHE_KWARG: cache}, use_cache=True)
    # keys, values: (batch, kv_heads, prompt, head_dim) per layer
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def _replay(cache, prefill: list, new_tokens: int, hooks=None) -> float:
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
    seconds: dict[str, list[float]] = {route: [] for route in ROUTES}
    with watch(model) as watching:
        hooks = _watch_hooks(model, watching)
        build = {
            "plain": lambda: (_compat.DynamicCache(config=model.config), None),
            "instrumented": lambda: (make_cache("dynamic", model.config), None),
            "watched": lambda: (_compat.DynamicCache(config=model.config), hooks),
        }
        for route in ROUTES:  # warm-up, not counted
            cache, route_hooks = build[route]()
            _replay(cache, prefill, new_tokens, route_hooks)
        for _, route in interleaved(list(ROUTES), repeats):
            cache, route_hooks = build[route]()
            seconds[route].append(_replay(cache, prefill, new_tokens, route_hooks))
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
    seconds: dict[str, list[float]] = {route: [] for route in STRATEGY_ROUTES}
    with watch(model) as watching:
        hooks = {"plain": None, "watched": _watch_hooks(model, watching)}

        def replay(route: str) -> float:
            kind, how = route.split()
            return _replay(caches[kind](), prefill, new_tokens, hooks[how])

        for route in STRATEGY_ROUTES:  # warm-up, not counted
            replay(route)
        for _, route in interleaved(list(STRATEGY_ROUTES), repeats):
            seconds[route].append(replay(route))
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
