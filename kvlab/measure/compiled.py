"""`torch.compile` with a StaticCache: compile time, steady speed, and when it compiles again.
transformers compiles only the decoding forward, so a new `max_cache_len` compiles again, a new prompt length not.
The cache is transformers' plain `StaticCache`: kvlab's instrumentation would break the graph."""

from __future__ import annotations

import torch

from kvlab import _compat
from kvlab.i18n import C_, _
from kvlab.measure.step_times import greedy_generate
from kvlab.measure.timing import Stopwatch, Timing, compare, time_interleaved


class CountingBackend:
    """A torch.compile backend that counts the graphs it compiles and passes them on (inductor or eager)."""

    def __init__(self, inductor: bool = True):
        self.inductor = inductor
        self.graphs = 0

    def __deepcopy__(self, memo):
        return self  # generate deep-copies its CompileConfig; the copy must count into this instance

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        if not self.inductor:
            return graph_module.forward
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(graph_module, example_inputs)


def static_generate(
    model,
    input_ids: torch.Tensor,
    new_tokens: int,
    max_cache_len: int,
    backend: CountingBackend | None = None,
    pad_token_id: int | None = None,
) -> tuple[list[int], float]:
    """(new token ids, seconds) of a greedy `generate` of exactly `new_tokens` tokens with a fresh StaticCache;
    compiled decoding when `backend` is given."""
    config = None
    if backend is not None:
        config = _compat.compile_config_all_devices(backend=backend, mode=None, fullgraph=False, dynamic=False)
    cache = _compat.StaticCache(config=model.config, max_cache_len=max_cache_len)
    input_ids = input_ids.to(model.device)
    pad = {} if pad_token_id is None else {"pad_token_id": pad_token_id}
    options = {"min_new_tokens": new_tokens, "compile_config": config, "disable_compile": backend is None, **pad}
    with Stopwatch() as watch:
        output = greedy_generate(model, input_ids, new_tokens, cache, **options)
    return output[0, input_ids.shape[-1] :].tolist(), watch.seconds


def decode_graphs(model, input_ids: torch.Tensor, cache, new_tokens: int) -> list[dict]:
    """The graphs `torch.compile` traces for each decoding forward of a greedy `generate` into `cache` (a
    `DynamicCache` or a `StaticCache`): one row per decoding call, with the key slots the cache held when the call
    began and the graphs traced during it. Compiled as transformers' `CompileConfig` does by default
    (`dynamic=False`: a graph per input shape); only the one-token decoding forwards, the prefill eager, as in
    `generate`. The backend only counts (no inductor): which shapes need a graph does not depend on it."""
    if not 1 < new_tokens <= torch._dynamo.config.recompile_limit:  # past the limit dynamo stops compiling
        raise ValueError(
            _("new_tokens must be between 2 and {limit}, got {n}").format(
                limit=torch._dynamo.config.recompile_limit, n=new_tokens
            )
        )
    torch._dynamo.reset()  # forget graphs from earlier calls, so counts start at zero
    backend = CountingBackend(inductor=False)
    eager_forward = model.forward
    compiled_forward = torch.compile(eager_forward, backend=backend, dynamic=False)
    steps: list[dict] = []

    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids")
        if ids is None or ids.shape[-1] != 1:  # the prefill
            return eager_forward(*args, **kwargs)
        held = _compat.forward_cache(kwargs)
        slots = int(held.layers[0].keys.shape[-2]) if held is not None and held.layers[0].keys is not None else 0
        before = backend.graphs
        output = compiled_forward(*args, **kwargs)
        steps.append({"call": len(steps) + 1, "key_slots": slots, "new_graphs": backend.graphs - before})
        return output

    patched = model.__dict__.get("forward")  # a forward someone set on the instance, put back afterwards
    model.forward = forward  # an instance attribute: `generate` calls it
    try:
        # compiled here, by the wrapper, not by generate
        greedy_generate(
            model, input_ids.to(model.device), new_tokens, cache, min_new_tokens=new_tokens, disable_compile=True
        )
    finally:
        if patched is None:
            del model.forward  # the class's forward again
        else:
            model.forward = patched
    return steps


def compile_report(
    model, prompts: list[torch.Tensor], new_tokens: int, max_cache_len: int, inductor: bool = True, repeats: int = 5
) -> dict:
    """Eager vs compiled generation: eager on prompts[0] (after a warm-up); compiled on prompts[0] twice (compiling,
    then steady), on each further prompt, and with `max_cache_len * 2`, each run with the graphs compiled during
    it. "steady" compares `repeats` interleaved runs of each once the graphs exist, compiled / eager."""
    torch._dynamo.reset()  # forget graphs from earlier calls, so counts start at zero
    backend = CountingBackend(inductor)
    static_generate(model, prompts[0], new_tokens, max_cache_len)  # warm-up: first-call costs are not decoding
    eager_tokens, eager_seconds = static_generate(model, prompts[0], new_tokens, max_cache_len)
    runs, same = [], True
    # (prompt, max_cache_len, the run's name (a key the caller looks up), the reader's words for it)
    longer = f"max_cache_len {max_cache_len * 2}"
    plan = [
        (prompts[0], max_cache_len, "first compiled run", _("first compiled run")),
        (prompts[0], max_cache_len, "same prompt again", _("same prompt again")),
        *[
            (p, max_cache_len, f"prompt of {p.shape[-1]} tokens", _("prompt of {n} tokens").format(n=p.shape[-1]))
            for p in prompts[1:]
        ],
        (prompts[0], max_cache_len * 2, longer, longer),
    ]
    for ids, cache_len, name, label in plan:
        before = backend.graphs
        tokens, seconds = static_generate(model, ids, new_tokens, cache_len, backend)
        if ids is prompts[0]:
            same &= tokens == eager_tokens
        runs.append(
            {
                "run": name,
                "label": label,
                "prompt_tokens": ids.shape[-1],
                "max_cache_len": cache_len,
                "new_graphs": backend.graphs - before,
                "seconds": seconds,
            }
        )
    graphs_before = backend.graphs
    timings = time_interleaved(
        {
            "eager": lambda: static_generate(model, prompts[0], new_tokens, max_cache_len),
            "compiled": lambda: static_generate(model, prompts[0], new_tokens, max_cache_len, backend),
        },
        repeats=repeats,
        warmup=0,  # the compiled graph exists already (the runs above); eager was warmed up first
    )
    # the reader's words: the verdict prints the labels ("compilado vs. eager" in Portuguese)
    eager = Timing(C_("timing label", "eager"), timings["eager"].times)
    steady = compare(eager, Timing(C_("timing label", "compiled"), timings["compiled"].times), warn=False)
    return {
        "eager_seconds": eager_seconds,
        "steady": steady.as_dict(),
        "steady_graphs": backend.graphs - graphs_before,  # 0: the timed compiled runs only replayed graphs
        "first_compiled_seconds": runs[0]["seconds"],
        "steady_seconds": runs[1]["seconds"],
        "graphs_first": runs[0]["new_graphs"],
        "runs": runs,
        "same_tokens": same,
    }


def compile_runs(
    model, prompts: list[torch.Tensor], new_tokens: int, pad_token_id: int | None = None, inductor: bool = True
) -> list[dict]:
    """One compiled greedy `generate` per prompt, each with a StaticCache of exactly prompt + `new_tokens`: seconds,
    graphs compiled during that call, and the new token ids (prompts [p, p, shorter]: compile, reuse, recompile)."""
    backend = CountingBackend(inductor)
    runs = []
    for ids in prompts:  # ids: (1, prompt_tokens)
        before = backend.graphs
        tokens, seconds = static_generate(model, ids, new_tokens, ids.shape[-1] + new_tokens, backend, pad_token_id)
        runs.append(
            {
                "prompt_tokens": int(ids.shape[-1]),
                "seconds": seconds,
                "graphs_compiled": backend.graphs - before,
                "token_ids": tokens,
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
