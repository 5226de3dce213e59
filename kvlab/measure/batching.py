"""Continuous batching against one request at a time, on this machine: `generate_batch` vs one `generate` each.

`model.generate_batch(...)` serves every request from one paged cache, one forward per step over all requests in
flight; the baseline runs `model.generate` once per request, each with its own DynamicCache. Both are greedy with
no end-of-sequence stop, so the tokens must agree. `batching_row` reports both wall times (interleaved repeats,
medians and quartiles) and their ratio with a bootstrap interval and a verdict (`kvlab.measure.timing.compare`).
Both routes run the same tokens through the model; what differs is how many forwards carry them (counted,
exactly, in `sequential_forwards` and `batched_forwards`): one request at a time, each request costs `new_tokens`
forwards of its own; batched, one forward per step carries every request in flight. Which way the ratio goes
depends on the machine and the model: batching pays off when one forward is bound by reading the weights (memory
traffic) rather than by arithmetic, so the verdict, not an expectation, says which route won. The attention
implementation for the paged run is transformers' CPU-capable "paged|eager", switched by the paged kind's own runner
(`kvlab.serving.batch_run.run_batch`).

Notebook 12 and `kvlab bench --batching` (through `kvlab.bench.batching`) both call `batching_row`.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from kvlab import _compat
from kvlab.caches.options import pool_blocks
from kvlab.i18n import _
from kvlab.measure.timing import compare, time_interleaved
from kvlab.serving.batch_run import run_batch


def _greedy_config(new_tokens: int):
    """Exactly `new_tokens` greedy tokens for both routes: no end-of-sequence token stops a request early."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)


def _sequential(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    outputs = []
    for ids in prompts:
        ids_tensor = torch.tensor([ids], device=model.device)  # (1, prompt_tokens)
        out = model.generate(
            ids_tensor, attention_mask=torch.ones_like(ids_tensor), generation_config=_greedy_config(new_tokens)
        )
        outputs.append(out[0, len(ids) :].tolist())
    return outputs


def _batched(model, prompts: list[list[int]], new_tokens: int, page_size: int) -> list[list[int]]:
    # room for every request at its final length: without num_blocks, transformers sizes the pool from free memory
    blocks = pool_blocks([len(ids) for ids in prompts], new_tokens, page_size, num_blocks=0)
    batching = _compat.ContinuousBatchingConfig(
        page_size=page_size, num_blocks=blocks, max_batch_tokens=sum(len(ids) for ids in prompts)
    )
    return run_batch(model, prompts, _greedy_config(new_tokens), batching)


@contextmanager
def _quiet_transformers():
    """transformers warns on every call that eos_token_id -1 never stops a request: that is the point here."""
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)


@contextmanager
def _count_forwards(model, counts: dict, route: list):
    """Count the model's forward calls into `counts[route[0]]` (the route running now)."""

    def hook(module, args):
        counts[route[0]] += 1

    handle = model.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def batching_row(
    model, prompts: list[list[int]], new_tokens: int, repeats: int = 3, page_size: int = 16, warmup: int = 0
) -> dict:
    """Median wall seconds of `generate_batch` and of sequential `generate` for the same greedy requests.

    `speedup` is sequential / batched (above 1: batching is faster) and `speedup_interval` its bootstrap interval;
    `verdict` is `compare(sequential, batched).verdict()`; `timings` holds each route's `Timing.as_dict()`
    (median, quartiles, every repeat). `warmup` untimed runs of each route come first."""
    tokens, forwards, route = {}, {"batched": 0, "sequential": 0}, [None]

    def batched_run():
        route[0], forwards["batched"] = "batched", 0  # the forwards of the latest run
        tokens["batched"] = _batched(model, prompts, new_tokens, page_size)

    def sequential_run():
        route[0], forwards["sequential"] = "sequential", 0
        tokens["sequential"] = _sequential(model, prompts, new_tokens)

    with _count_forwards(model, forwards, route), _quiet_transformers():
        timings = time_interleaved(
            {"batched": batched_run, "sequential": sequential_run}, repeats=repeats, warmup=warmup
        )
    batched, sequential = timings["batched"].median, timings["sequential"].median
    comparison = compare(timings["sequential"], timings["batched"], warn=False)
    return {
        "label": _("continuous batching ({requests} requests x {tokens} tokens, page_size {page_size})").format(
            requests=len(prompts), tokens=new_tokens, page_size=page_size
        ),
        "requests": len(prompts),
        "new_tokens": new_tokens,
        "repeats": repeats,
        "page_size": page_size,
        "batched_seconds": batched,
        "sequential_seconds": sequential,
        "speedup": sequential / batched,
        "speedup_interval": [1 / comparison.high, 1 / comparison.low],
        "verdict": comparison.verdict(),
        "batched_forwards": forwards["batched"],
        "sequential_forwards": forwards["sequential"],
        "timings": {label: timing.as_dict() for label, timing in timings.items()},
        "same_tokens": tokens["batched"] == tokens["sequential"],
    }
