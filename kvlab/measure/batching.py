"""Continuous batching against one request at a time, on this machine: `generate_batch` vs one `generate` each.
Batching pays off when a forward is bound by reading the weights rather than by arithmetic, so the measured
verdict, not an expectation, says which route won."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from kvlab import _compat
from kvlab.caches.options import pool_blocks
from kvlab.i18n import _
from kvlab.measure.step_times import greedy_generate
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
        out = greedy_generate(model, ids_tensor, new_tokens, generation_config=_greedy_config(new_tokens))
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


def batching_row(
    model, prompts: list[list[int]], new_tokens: int, repeats: int = 3, page_size: int = 16, warmup: int = 0
) -> dict:
    """Median wall seconds of `generate_batch` and of sequential `generate` for the same greedy requests;
    `speedup` is sequential / batched (above 1: batching is faster), with its bootstrap interval and verdict."""
    tokens, forwards, route = {}, {"batched": 0, "sequential": 0}, [""]  # route[0]: the route running now

    def batched_run():
        route[0], forwards["batched"] = "batched", 0  # the forwards of the latest run
        tokens["batched"] = _batched(model, prompts, new_tokens, page_size)

    def sequential_run():
        route[0], forwards["sequential"] = "sequential", 0
        tokens["sequential"] = _sequential(model, prompts, new_tokens)

    def count(module, args):
        forwards[route[0]] += 1

    handle = model.register_forward_pre_hook(count)
    try:
        with _quiet_transformers():
            timings = time_interleaved({"batched": batched_run, "sequential": sequential_run}, repeats, warmup)
    finally:
        handle.remove()
    timings["batched"].label, timings["sequential"].label = _("batched"), _("sequential")  # shown; keys stay
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
