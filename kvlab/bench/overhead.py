"""Instrumentation overhead, `kvlab bench --overhead`: kvlab's InstrumentedDynamicCache, and plain `generate`
inside `kvlab.watch`, against transformers' own DynamicCache; greedy tokens must be identical in all three.
"""

from __future__ import annotations

import torch

from kvlab.bench.configs import BenchConfig
from kvlab.bench.recording_cost import ROUTES, recording_cost, recording_lines
from kvlab.bench.runner import BenchSettings, generate_once
from kvlab.i18n import _
from kvlab.measure.text import token_windows
from kvlab.measure.timing import Timing, compare, median
from kvlab.watcher import watch


def run_overhead(model, tokenizer, settings: BenchSettings) -> dict:
    """Median decode tokens/s of plain, instrumented and watched `generate` over `settings.repeats` repeats (after
    one warm-up), and each route's decode time per token against plain's, with its interval and verdict.

    The routes run in a rotated order: a fixed one would give a route the same neighbour every time, and what a run
    leaves behind (the allocator's state, a warm cache) would weigh on the same side of the ratio.
    """
    settings.check()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    ids = token_windows(tokenizer, settings.prompt_tokens, 1, settings.seed)[0].to(model.device)  # (1, prompt)
    plain = BenchConfig("plain", "dynamic", plain=True)
    configs = {"plain": plain, "instrumented": BenchConfig("instrumented", "dynamic"), "watched": plain}
    runs: dict[str, list[dict]] = {name: [] for name in configs}
    generate_once(model, tokenizer, plain, ids, settings.new_tokens)  # warm-up, not counted
    for name in rotated(ROUTES, settings.repeats):
        if name == "watched":  # transformers' own code and cache, recorded by kvlab.watch
            with watch(model) as watched:
                runs[name].append(generate_once(model, tokenizer, plain, ids, settings.new_tokens))
            steps = watched.trace.summary()["steps"]
            if steps != settings.new_tokens:
                raise RuntimeError(
                    _("kvlab.watch recorded {steps} steps of generate, not {new_tokens}").format(
                        steps=steps, new_tokens=settings.new_tokens
                    )
                )
        else:
            runs[name].append(generate_once(model, tokenizer, configs[name], ids, settings.new_tokens))
    speed = {name: median([r["decode_tokens_per_s"] for r in rs]) for name, rs in runs.items()}
    # seconds per decoded token, one per repeat: the times the ratio and its interval are taken from
    per_token = {name: Timing(name, [1 / r["decode_tokens_per_s"] for r in rs]) for name, rs in runs.items()}
    compared = {name: compare(per_token["plain"], per_token[name], warn=False) for name in ROUTES[1:]}
    # the whole-run ratio's interval is the machine's noise (5-10 % per run here): recording's own share, replayed
    cost = recording_cost(model, ids, settings.new_tokens, plain_step_s=1 / speed["plain"])
    return {
        "model": settings.model,
        "prompt_tokens": settings.prompt_tokens,
        "new_tokens": settings.new_tokens,
        "repeats": settings.repeats,
        "threads": torch.get_num_threads(),
        "device": str(model.device),
        "plain_decode_tokens_per_s": speed["plain"],
        "instrumented_decode_tokens_per_s": speed["instrumented"],
        "watched_decode_tokens_per_s": speed["watched"],
        "time_ratio": speed["plain"] / speed["instrumented"],
        "watched_time_ratio": speed["plain"] / speed["watched"],
        "instrumented_interval": [compared["instrumented"].low, compared["instrumented"].high],
        "watched_interval": [compared["watched"].low, compared["watched"].high],
        "instrumented_verdict": compared["instrumented"].verdict(),
        "watched_verdict": compared["watched"].verdict(),
        "same_tokens": all(runs[name][0]["tokens"] == runs["plain"][0]["tokens"] for name in runs),
        "recording": cost,
    }


def rotated(labels: tuple[str, ...], repeats: int) -> list[str]:
    """Every label once per repeat, the order rotated by one each repeat (a Latin square over len(labels) repeats)."""
    return [labels[(r + i) % len(labels)] for r in range(repeats) for i in range(len(labels))]


def overhead_lines(result: dict) -> list[str]:
    """The human report of `run_overhead`."""
    lines = []
    plain = result["plain_decode_tokens_per_s"]
    for name in ROUTES[1:]:
        speed = result[f"{name}_decode_tokens_per_s"]
        low, high = result[f"{name}_interval"]
        lines.append(
            f"{name} / plain decode time: {plain / speed:.3f}x (95% interval {low:.3f}-{high:.3f}; {speed:.1f} vs "
            f"{plain:.1f} tok/s, median of {result['repeats']} interleaved repeats): {result[f'{name}_verdict']}"
        )
    lines.extend(recording_lines(result["recording"]))
    lines.append(f"same tokens: {result['same_tokens']}")
    return lines
