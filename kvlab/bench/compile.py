"""static + torch.compile: what compiling costs, and when `generate` compiles again.

transformers compiles the decoding forward itself when the cache is compileable (a StaticCache); on a CPU it
only does so when asked (`CompileConfig._compile_all_devices`). The compiled forward runs with transformers'
own StaticCache: kvlab's recording hooks are Python side effects that dynamo would have to break the graph on,
and the bytes of a static cache do not depend on compilation (the static row has them).

Graphs are counted with dynamo's own counter (`counters["stats"]["unique_graphs"]`), per `generate` call:
call 1 compiles, call 2 (same prompt length) should reuse, call 3 (a new prompt length) shows a recompile.
"""

from __future__ import annotations

import time

import torch

from kvlab import _compat


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_runs(model, prompts: list[torch.Tensor], new_tokens: int, pad_token_id) -> list[dict]:
    """One compiled greedy `generate` per prompt: seconds and dynamo graphs compiled during that call."""
    from transformers import StaticCache
    from transformers.generation.configuration_utils import CompileConfig

    config = CompileConfig(fullgraph=False, mode="default")
    config._compile_all_devices = True
    runs = []
    for ids in prompts:  # ids: (1, prompt_tokens)
        ids = ids.to(model.device)
        cache = StaticCache(config=model.config, max_cache_len=ids.shape[-1] + new_tokens)
        before = _graphs()
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=pad_token_id,
                compile_config=config,
                **{_compat.CACHE_KWARG: cache},
            )
        runs.append(
            {
                "prompt_tokens": int(ids.shape[-1]),
                "seconds": time.perf_counter() - started,
                "graphs_compiled": _graphs() - before,
                "token_ids": out[0, ids.shape[-1] :].tolist(),
            }
        )
    return runs


def compile_summary(runs: list[dict]) -> dict:
    """Compile time = first call minus a call that reused the graphs; recompiles per call."""
    steady = [r["seconds"] for r in runs[1:] if r["graphs_compiled"] == 0]
    return {
        "calls": [{k: v for k, v in r.items() if k != "token_ids"} for r in runs],
        "compile_seconds": runs[0]["seconds"] - min(steady) if steady else runs[0]["seconds"],
        "recompiles_per_call": [r["graphs_compiled"] for r in runs],
        "first_call_tokens": runs[0]["token_ids"],
    }
