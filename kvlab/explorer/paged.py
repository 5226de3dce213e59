"""The explorer's "paged (generate_batch)" kind: many requests through transformers' continuous batching.

Every other kind runs one prompt through `generate` with one cache; this one runs several requests through
`model.generate_batch(...)` (attention "paged|eager", so it runs on a CPU) inside `kvlab.watch(model)`, where the
manager builds `kvlab.caches.paged.InstrumentedPagedAttentionCache` (notebook 12 shows the same call). Its
options are the page size (token slots per block), how many requests and the pool's size in blocks (0: room
for every request at its final length, so nobody waits); "max new tokens" is the answer cap of every request.

The requests: with a real tokenizer, the first n of `kvlab.serving.load_workload` (chat prompts, through the chat
template when the tokenizer has one); with a tiny random model's byte tokenizer, seeded random token prompts of
varied lengths (as `tests/caches/test_paged.py` uses), which run to exactly "max new tokens" each.

Models with layers other than full attention are refused before anything runs (`check_paged_model`); a pool too
small for the largest request is refused too (transformers would fail every request with "No requests can be
scheduled"). `generate_batch` cannot be stopped midway: it returns when every request is done.
"""

from __future__ import annotations

from kvlab.caches.options import CacheOptionError
from kvlab.i18n import N_, _, marks
from kvlab.measure.timing import Stopwatch
from kvlab.names import dtype_name, model_name
from kvlab.serving.workload import load_workload
from kvlab.size.paged import paged_blocks

PAGED = "paged"
PAGED_LABEL = N_("paged (generate_batch)")  # shown as `_(PAGED_LABEL)` in the cache dropdown
PAGED_OPTIONS = ("page_size", "requests", "num_blocks")
PAGE_SIZES = (4, 8, 16, 32, 64, 128, 256)
PAGED_DEFAULTS = {"page_size": 16, "requests": 4, "num_blocks": 0}
MAX_REQUESTS = len(load_workload().ids)  # the bundled workload's requests (a small JSON file, no tokenizer)
TINY_LENGTHS = (5, 19, 11, 30, 8, 23, 14, 27)  # prompt tokens of the tiny models' random requests, in order
TINY_SEED = 0


def is_paged_trace(trace) -> bool:
    """A trace recorded from transformers' paged cache (live or loaded from a saved file)."""
    return trace.meta.get("cache_kind") == PAGED and isinstance(trace.meta.get("paged"), dict)


def check_paged_options(options: dict) -> dict:
    """The paged options with their values checked (one-line CacheOptionError), defaults filled in."""
    wrong = sorted(set(options) - set(PAGED_OPTIONS))
    if wrong:
        raise CacheOptionError(
            f"cache kind {PAGED!r} does not take {', '.join(wrong)}; it takes {', '.join(PAGED_OPTIONS)}"
        )
    given = {**PAGED_DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    if given["page_size"] not in PAGE_SIZES:
        raise CacheOptionError(
            f"page_size must be one of {', '.join(map(str, PAGE_SIZES))}; got {given['page_size']!r}"
        )
    if not isinstance(given["requests"], int) or not 1 <= given["requests"] <= MAX_REQUESTS:
        raise CacheOptionError(f"requests must be between 1 and {MAX_REQUESTS}; got {given['requests']!r}")
    if not isinstance(given["num_blocks"], int) or given["num_blocks"] < 0:
        raise CacheOptionError(
            f"num_blocks must be 0 (room for every request) or a positive number of blocks; got {given['num_blocks']!r}"
        )
    return given


def _is_byte_tokenizer(tokenizer) -> bool:
    from kvlab.explorer.models import ByteTokenizer

    return isinstance(tokenizer, ByteTokenizer)


def paged_requests(tokenizer, n: int) -> tuple[list[str], list[list[int]]]:
    """(names, prompt token ids) of the first `n` requests: the workload, or random prompts for a tiny model."""
    if _is_byte_tokenizer(tokenizer):
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


def pool_blocks(prompts: list[list[int]], new_tokens: int, page_size: int, num_blocks: int) -> int:
    """The pool's size in blocks: `num_blocks`, or (0) room for every request at its final length.

    Refuses (CacheOptionError) a pool smaller than the largest request alone needs: transformers would fail
    every request."""
    need = [paged_blocks(len(p) + new_tokens, page_size) for p in prompts]
    if num_blocks == 0:
        return sum(need)
    if num_blocks < max(need):
        longest = max(len(p) for p in prompts) + new_tokens
        raise CacheOptionError(
            f"num_blocks={num_blocks} is too small: the largest request ({longest} tokens with its answer) needs "
            f"{max(need)} blocks of {page_size}; use at least {max(need)}, or 0 for room for every request "
            f"({sum(need)} blocks)"
        )
    return num_blocks


def generate_paged(model, tokenizer, options: dict, max_new_tokens: int):
    """`model.generate_batch(...)` over the chosen requests inside `kvlab.watch(model)`: a `RunResult` whose trace
    is the paged cache's (with the requests' names and lengths in `trace.meta["paged_requests"]`)."""
    from transformers import GenerationConfig

    from kvlab import _compat
    from kvlab.caches.paged import check_paged_model
    from kvlab.recorded_run import RunResult
    from kvlab.watcher import watch as watch_model

    given = check_paged_options(options)
    check_paged_model(model)
    names, prompts = paged_requests(tokenizer, given["requests"])
    blocks = pool_blocks(prompts, max_new_tokens, given["page_size"], given["num_blocks"])
    tiny = _is_byte_tokenizer(tokenizer)
    generation_config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=-1 if tiny else tokenizer.eos_token_id,
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
    )
    batching = _compat.ContinuousBatchingConfig(
        page_size=given["page_size"], num_blocks=blocks, max_batch_tokens=max(sum(len(p) for p in prompts), 64)
    )
    with _compat.paged_attention(model), Stopwatch() as stopwatch, watch_model(model) as watch:
        outputs = model.generate_batch(
            prompts, generation_config=generation_config, continuous_batching_config=batching
        )
    seconds = stopwatch.seconds
    failed = {rid: out.error for rid, out in outputs.items() if out.error is not None}
    if failed or len(outputs) != len(prompts):
        detail = next(iter(failed.values()), f"{len(outputs)} of {len(prompts)} requests returned")
        raise RuntimeError(f"generate_batch failed: {detail}")
    trace = watch.trace
    # request ids are "req_0", "req_1", ... in the order of `prompts`
    generated = [list(outputs[f"req_{i}"].generated_tokens) for i in range(len(prompts))]
    lines = [
        f"req_{i} ({name}): {tokenizer.decode(tokens, skip_special_tokens=True)}"
        for i, (name, tokens) in enumerate(zip(names, generated))
    ]
    new_tokens = sum(len(t) for t in generated)
    trace.meta.update(
        {
            "options": dict(given),
            "pool_blocks": blocks,
            "prompt_tokens": sum(len(p) for p in prompts),
            "new_tokens": new_tokens,
            "seconds": seconds,
            "tokens_per_s": new_tokens / seconds if seconds > 0 else 0.0,
            "max_new_tokens": max_new_tokens,
            "paged_requests": [
                {"id": f"req_{i}", "name": name, "prompt_tokens": len(p), "new_tokens": len(t)}
                for i, (name, p, t) in enumerate(zip(names, prompts, generated))
            ],
        }
    )
    return RunResult(
        model_name(model),
        PAGED,
        dict(given),
        dtype_name(model.dtype),
        sum(len(p) for p in prompts),
        [t for tokens in generated for t in tokens],
        "\n".join(lines),
        seconds,
        trace,
    )


def paged_row_fields(trace) -> dict:
    """The summary-table fields of a paged run: blocks at the peak, fragmentation over forwards, queueing."""
    from kvlab.caches.paged import paged_summary

    s = paged_summary(trace)
    return {
        "waste_pct": s["fragmentation_pct_mean"],
        "blocks_peak": s["peak_blocks_in_use"],
        "num_blocks": s["num_blocks"],
        "requests_waited": s["requests_refused"],
        "preemptions": s["preemptions"],
        "requests_finished": s["finished"],
    }


def paged_figure(trace, title: str = ""):
    """The block timeline (`kvlab.plots.blocks.plot_block_timeline`) of a paged trace, on a bare Figure."""
    from kvlab.caches.paged import paged_summary
    from kvlab.plots.blocks import plot_block_timeline

    s = paged_summary(trace)
    detail = _("{blocks} blocks of {page_size}: peak {peak} in use, {percent} % of handed-out slots empty").format(
        blocks=s["num_blocks"],
        page_size=s["page_size"],
        peak=s["peak_blocks_in_use"],
        percent=marks(str(s["fragmentation_pct_mean"])),
    )
    return plot_block_timeline(trace, title=f"{title}\n{detail}" if title else detail)
