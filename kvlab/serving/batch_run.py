"""The paged cache kind's runner: many requests through transformers' continuous batching (`generate_batch`),
recorded inside `kvlab.watch(model)`, under the attention implementation it needs without flash attention
(`_compat.paged_attention`: it runs on a CPU). `generate_batch` cannot be stopped midway.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.cache_kinds import PAGED
from kvlab.caches.options import check_paged_options, pool_blocks
from kvlab.i18n import _
from kvlab.measure.timing import Stopwatch
from kvlab.names import dtype_name, model_name
from kvlab.serving.workload import load_workload

MAX_REQUESTS = len(load_workload())  # the bundled workload's requests (a small JSON file, no tokenizer)
TINY_LENGTHS = (5, 19, 11, 30, 8, 23, 14, 27)  # prompt tokens of the tiny models' random requests, in order
TINY_SEED = 0


def paged_requests(tokenizer, n: int, *, random_tokens: bool = False) -> tuple[list[str], list[list[int]]]:
    """(names, prompt token ids) of the first `n` requests: the workload's (through the chat template when the
    tokenizer has one), or seeded random prompts for a tiny model (no end-of-sequence token stops them)."""
    if random_tokens:
        import torch

        generator = torch.Generator().manual_seed(TINY_SEED)
        ids = [
            torch.randint(3, 120, (TINY_LENGTHS[i % len(TINY_LENGTHS)],), generator=generator).tolist()
            for i in range(n)
        ]
        return [f"random {len(p)} tokens" for p in ids], ids
    if getattr(tokenizer, "chat_template", None):
        workload = load_workload(tokenizer).first(n)
        return list(workload.ids), [list(p) for p in workload.input_ids]
    from kvlab.recorded_run import encode

    workload = load_workload().first(n)  # a tokenizer without a chat template: the prompts as plain text
    return list(workload.ids), [encode(tokenizer, p)[0].tolist() for p in workload.prompts]


def run_batch(model, prompts: list[list[int]], generation_config, batching) -> list[list[int]]:
    """`model.generate_batch(prompts, ...)` under continuous batching's attention implementation: each request's
    new tokens, in order. A failed request raises RuntimeError (transformers only reports it in its output)."""
    with _compat.paged_attention(model):
        outputs = model.generate_batch(
            prompts, generation_config=generation_config, continuous_batching_config=batching
        )
    failed = {rid: out.error for rid, out in outputs.items() if out.error is not None}
    if failed or len(outputs) != len(prompts):
        detail = next(iter(failed.values()), f"{len(outputs)} of {len(prompts)} requests returned")
        raise RuntimeError(_("generate_batch failed: {detail}").format(detail=detail))
    # request ids are "req_0", "req_1", ... in the order of `prompts`
    return [list(outputs[f"req_{i}"].generated_tokens) for i in range(len(prompts))]


def generate_paged(model, tokenizer, options: dict, max_new_tokens: int, *, random_tokens: bool = False):
    """`model.generate_batch(...)` over the chosen requests inside `kvlab.watch(model)`, every option checked first:
    a `RunResult` whose trace is the paged cache's (the requests in `trace.meta["paged_requests"]`)."""
    from transformers import GenerationConfig

    from kvlab.caches.paged import check_paged_model
    from kvlab.recorded_run import RunResult
    from kvlab.watcher import watch as watch_model

    given = check_paged_options(options, MAX_REQUESTS)
    check_paged_model(model)
    names, prompts = paged_requests(tokenizer, given["requests"], random_tokens=random_tokens)
    prompt_tokens = sum(len(p) for p in prompts)
    blocks = pool_blocks([len(p) for p in prompts], max_new_tokens, given["page_size"], given["num_blocks"])
    generation_config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=-1 if random_tokens else tokenizer.eos_token_id,
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
    )
    batching = _compat.ContinuousBatchingConfig(
        page_size=given["page_size"], num_blocks=blocks, max_batch_tokens=max(prompt_tokens, 64)
    )
    with Stopwatch() as stopwatch, watch_model(model) as watch:
        generated = run_batch(model, prompts, generation_config, batching)
    seconds, new_tokens = stopwatch.seconds, sum(len(t) for t in generated)
    watch.trace.meta.update(
        options=dict(given),
        pool_blocks=blocks,
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        seconds=seconds,
        tokens_per_s=new_tokens / seconds if seconds > 0 else 0.0,
        max_new_tokens=max_new_tokens,
        paged_requests=[
            {"id": f"req_{i}", "name": name, "prompt_tokens": len(p), "new_tokens": len(t)}
            for i, (name, p, t) in enumerate(zip(names, prompts, generated))
        ],
    )
    text = "\n".join(
        f"req_{i} ({name}): {tokenizer.decode(tokens, skip_special_tokens=True)}"
        for i, (name, tokens) in enumerate(zip(names, generated))
    )
    flat = [t for tokens in generated for t in tokens]
    return RunResult(
        model_name(model), PAGED, dict(given), dtype_name(model.dtype), prompt_tokens, flat, text, seconds, watch.trace
    )
