"""Continuous batching against one request at a time, on this machine: the `kvlab bench` batching row.

`model.generate_batch(...)` serves every request from one paged cache, one forward per step over all requests in
flight; the baseline runs `model.generate` once per request, each with its own DynamicCache. Both are greedy, so
the tokens must agree; the row reports both wall times (interleaved repeats, medians) and their ratio, which on a
CPU may well favour the sequential calls: batching pays off when one forward is bound by memory traffic, not
arithmetic. The attention implementation for the paged run is transformers' CPU-capable "paged|eager".
"""

from __future__ import annotations

import time

import torch

from kvlab import _compat
from kvlab.measure.timing import interleaved, median
from kvlab.size.paged import paged_blocks


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
    config = _greedy_config(new_tokens)
    # room for every request at its final length: without num_blocks, transformers sizes the pool from free memory
    blocks = sum(paged_blocks(len(ids) + new_tokens, page_size) for ids in prompts)
    batching = _compat.ContinuousBatchingConfig(
        page_size=page_size, num_blocks=blocks, max_batch_tokens=sum(len(ids) for ids in prompts)
    )
    previous = model.config._attn_implementation
    model.set_attn_implementation(_compat.PAGED_ATTN_IMPLEMENTATION)
    try:
        out = model.generate_batch(prompts, generation_config=config, continuous_batching_config=batching)
    finally:
        model.set_attn_implementation(previous)
    # request ids are "req_0", "req_1", ... in the order of `prompts`
    return [list(out[f"req_{i}"].generated_tokens) for i in range(len(prompts))]


def batching_row(model, prompts: list[list[int]], new_tokens: int, repeats: int = 3, page_size: int = 16) -> dict:
    """Median wall seconds of `generate_batch` and of sequential `generate` for the same greedy requests."""
    runs = {"batched": [], "sequential": []}
    tokens = {}
    for _, name in interleaved(list(runs), repeats):
        started = time.perf_counter()
        if name == "batched":
            tokens[name] = _batched(model, prompts, new_tokens, page_size)
        else:
            tokens[name] = _sequential(model, prompts, new_tokens)
        runs[name].append(time.perf_counter() - started)
    batched, sequential = median(runs["batched"]), median(runs["sequential"])
    return {
        "label": f"continuous batching ({len(prompts)} requests x {new_tokens} tokens, page_size {page_size})",
        "requests": len(prompts),
        "new_tokens": new_tokens,
        "repeats": repeats,
        "page_size": page_size,
        "batched_seconds": batched,
        "sequential_seconds": sequential,
        "speedup": sequential / batched,
        "same_tokens": tokens["batched"] == tokens["sequential"],
    }
