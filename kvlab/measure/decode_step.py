"""One decode step, timed against the cache it reads: what masked slots cost in compute, not only in memory (eager
and SDPA attention score every slot a StaticCache hands back). Each cache is prefilled once, and each repeat of the
step is undone with the cache's own `crop(-1)`, so every repeat does the same work."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.measure.timing import Timing, check_one_prompt, time_interleaved


@dataclass
class DecodeStep:
    label: str
    timing: Timing  # seconds of the one decode forward, every repeat
    slots_attended: int | None  # key slots each query was scored against, summed over layers (None if not watched)
    attention_flops: int | None


def time_decode_step(model, input_ids: torch.Tensor, caches: dict, repeats: int = 7, warmup: int = 1) -> dict:
    """{label: DecodeStep} for one greedy decode step after `input_ids` (1, prompt) with each cache; inside
    `kvlab.watch(model)`, with the work counters beside the times."""
    check_one_prompt(input_ids)
    prompt = input_ids.shape[-1]
    input_ids = input_ids.to(model.device)
    with torch.inference_mode():
        logits = None
        for cache in caches.values():
            logits = model(input_ids, use_cache=True, **{_compat.CACHE_KWARG: cache}).logits  # (1, prompt, vocab)
        token = logits[:, -1:].argmax(-1)  # (1, 1): the same next token for every cache (greedy)
        position = torch.tensor([prompt], device=model.device)

        def step(cache):
            return lambda: model(token, cache_position=position, use_cache=True, **{_compat.CACHE_KWARG: cache})

        def roll_back(label):
            cache = caches[label]
            if int(cache.get_seq_length()) > prompt:
                cache.crop(-1)  # the step's token out again: every repeat starts from the same cache

        timings = time_interleaved(
            {label: step(cache) for label, cache in caches.items()}, repeats, warmup, before_each=roll_back
        )
        for label in caches:
            roll_back(label)  # each cache is left as it was after the prefill
    return {label: _with_work(label, timings[label], caches[label]) for label in caches}


def _with_work(label: str, timing: Timing, cache) -> DecodeStep:
    trace = getattr(cache, "trace", None)
    slots = flops = None
    if trace is not None:
        decode = [e for e in trace.updates if e["op"] == "kv" and e["queries"] == 1]
        last_step = decode[-1]["step"] if decode else None
        layers = [e for e in decode if e["step"] == last_step]
        slots = sum(e["slots_attended"] for e in layers)
        flops = sum(e["attention_flops"] for e in layers)
    return DecodeStep(label, timing, slots, flops)
