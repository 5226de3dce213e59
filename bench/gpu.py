"""The guide's speed claims on one CUDA GPU (issue 43), in one bounded run: random bfloat16 weights of real
architectures built from their configs (Llama-3.1-8B, and SmolLM2-135M beside the CPU numbers), so nothing is read
from the Hub or the disk.

Sections, each with its own time limit, each written to `--out/gpu.json` as soon as it ends (a timeout keeps what
came before): decode time per token of dynamic vs static caches at max_cache_len 1k/8k/32k (masked slots); eager vs
`torch.compile` static (`kvlab.measure.compiled.compile_report`); transformers' offloaded and offloaded_static vs
dynamic, with the bytes kvlab's trace saw move per token; quantized hqq int4 / quanto int4 / fp8 vs dynamic, with
peak device memory beside the trace's cache bytes; `kvlab.watch` overhead (whole runs, interleaved pairs).
Every ratio comes from `kvlab.measure.timing` (interleaved repeats, medians, bootstrap interval, verdict).

Timed runs use transformers' own cache classes (kvlab's instrumentation adds work of its own); the bytes come from
one more run of the same cache inside `kvlab.watch`.

    python3 bench/gpu.py --out $OUT                 # on the GPU machine, ~7 minutes
    .venv/bin/python bench/gpu.py --tiny --out /tmp/gpu-tiny   # a tiny config on the CPU, seconds (the test)

On a bare, offline GPU machine (Python 3.12, a CUDA torch, an older transformers), kvlab runs from the working
tree beside wheels carried in an ignored `.whl/` folder (34 MB), installed with `pip install --no-index --no-deps
--target /tmp/site .whl/*.whl` and `PYTHONPATH=/tmp/site:$PWD`. The set that session used (Python 3.12 wheels from
`pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform
manylinux2014_x86_64 ...`; hqq has no wheel: `pip wheel --no-deps hqq==0.2.8.post1` builds a pure-Python one):
transformers 5.25.0, huggingface_hub 2.4.0, kernels 0.19.1, hqq 0.2.8.post1, optimum-quanto 0.2.7, babel 2.19.0,
httpx2 2.16.2, httpcore2 2.16.2, truststore 0.10.5, anyio 4.16.0, typing_extensions 4.16.0, idna 3.20, h11 0.16.0,
click 8.5.1, hf_xet 1.8.0, regex 2026.11.19, tomlkit 0.15.3, termcolor 3.3.0. The command (carry `.whl`):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; export PYTHONUNBUFFERED=1;
    timeout 440 python3 bench/gpu.py --out $OUT --budget-s 380 > $OUT/log.txt 2>&1; tail -n 60 $OUT/log.txt

Not yet run on a GPU: the session that wrote it was refused a machine ("no new device machine is lent at present").
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing reaches the Hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

import kvlab
from kvlab import _compat
from kvlab.atomic import write_text
from kvlab.measure import timing
from kvlab.measure.offload_time import offload_traffic

# Llama-3.1-8B and SmolLM2-135M as their config.json files say (rope scaling included), written out: no Hub.
LLAMA_31_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}
SMOLLM2_135M = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "bos_token_id": 0,
    "eos_token_id": 0,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "eos_token_id": 0,
}

SIZES = {  # what the full run and --tiny measure
    "full": {"prompt": 512, "new": 32, "repeats": 3, "lengths": (1024, 8192, 32768), "small_lengths": (1024, 8192)},
    "tiny": {"prompt": 16, "new": 8, "repeats": 3, "lengths": (64, 128, 256), "small_lengths": (64, 128)},
}
NBITS = 4


class SectionTimeout(Exception):
    """The section's hard limit passed (SIGALRM): it keeps only what it put in `ctx.partial`; the next one starts."""


# ---------------------------------------------------------------- models and runs


def build_model(shape: dict, device: str):
    """Random bfloat16 weights of `shape`, built directly on `device` (no CPU copy of 8B parameters)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(**shape, attn_implementation="sdpa")
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.eval()


def prompt_ids(model, tokens: int, seed: int = 0) -> torch.Tensor:
    """(1, tokens) random token ids, fixed seed, never the end-of-sequence id."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, model.config.vocab_size, (1, tokens), generator=generator)
    return ids.to(model.device)


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def generate(model, ids: torch.Tensor, cache, new_tokens: int) -> dict:
    """One greedy `generate` of exactly `new_tokens` tokens into `cache` (transformers' class, or kvlab's):
    seconds per decoded token (the prefill left out), whole-run seconds, and the device's peak memory."""
    cuda = ids.device.type == "cuda"
    synchronize(ids.device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    clock = timing.DecodeClock()
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=model.config.eos_token_id,
            streamer=clock,
            **{_compat.CACHE_KWARG: cache},
        )
    synchronize(ids.device)
    clock.end()
    decoded = len(clock.stamps) - 1  # tokens after the first; the end is after the device finished
    return {
        "step_s": (clock.ended - clock.stamps[0]) / decoded,
        "seconds": clock.ended - clock.started,
        "tokens": out[0, ids.shape[-1] :].tolist(),
        "device_max_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


def transformers_cache(kind: str, model, options: dict):
    """A fresh cache of transformers' own class for `kind` (what the timed runs use)."""
    config = model.config
    if kind == "dynamic":
        return _compat.DynamicCache(config=config)
    if kind == "offloaded":
        return _compat.DynamicCache(config=config, offloading=True)
    if kind == "static":
        return _compat.StaticCache(config=config, max_cache_len=options["max_cache_len"])
    if kind == "offloaded_static":
        return _compat.StaticCache(config=config, max_cache_len=options["max_cache_len"], offloading=True)
    if kind == "quantized":
        return _compat.QuantizedCache(
            options["backend"], config, **{k: v for k, v in options.items() if k != "backend"}
        )
    raise ValueError(kind)


def compare_caches(model, ids, configs: dict, new_tokens: int, repeats: int, deadline, keep: dict) -> dict:
    """Interleaved repeats (after one warm-up each) of each {label: (kind, options)}; seconds per decoded token as
    `Timing`s, each compared with the first label. Stops repeating at `deadline` (at least one repeat each).
    `keep` (the section's `ctx.partial`) gets the seconds per token as they come, for a section cut short."""
    runs: dict[str, list[dict]] = {label: [] for label in configs}
    so_far = keep.setdefault("step_s_so_far", {})
    fresh = {
        label: (lambda kind=kind, options=options: transformers_cache(kind, model, options))
        for label, (kind, options) in configs.items()
    }
    for label in configs:
        generate(model, ids, fresh[label](), new_tokens)  # warm-up: first-call costs are not decoding
    for repeat, label in timing.interleaved(list(configs), repeats):
        if repeat > 0 and deadline.passed():
            break
        runs[label].append(generate(model, ids, fresh[label](), new_tokens))
        so_far.setdefault(label, []).append(runs[label][-1]["step_s"])
    reference = next(iter(configs))
    per_token = {label: timing.Timing(label, [r["step_s"] for r in rs]) for label, rs in runs.items() if rs}
    result = {}
    for label, rs in runs.items():
        if not rs:
            continue
        row = {"options": configs[label][1], "step": per_token[label].as_dict()}
        row["decode_tokens_per_s"] = 1 / per_token[label].median
        row["same_tokens_as_" + reference] = rs[0]["tokens"] == runs[reference][0]["tokens"]
        row["device_max_allocated"] = max((r["device_max_allocated"] or 0) for r in rs) or None
        if label != reference:
            row["vs_" + reference] = timing.compare(per_token[reference], per_token[label], warn=False).as_dict()
        result[label] = row
    return result


def watched_trace(model, ids, kind: str, options: dict, new_tokens: int):
    """The kvlab trace of one more run of the same transformers cache, inside `kvlab.watch`."""
    with kvlab.watch(model) as watched:
        generate(model, ids, transformers_cache(kind, model, options), new_tokens)
    return watched.trace


def summary_of(trace) -> dict:
    summary = trace.summary()
    return dict(summary) if hasattr(summary, "keys") else vars(summary)


# ---------------------------------------------------------------- sections


def section_static_lengths(ctx) -> dict:
    """Dynamic vs static at each max_cache_len: what attending to masked slots costs per token."""
    configs = {"dynamic": ("dynamic", {})}
    for n in ctx.sizes["lengths"]:
        configs[f"static {n}"] = ("static", {"max_cache_len": n})
    rows = compare_caches(
        ctx.model, ctx.ids, configs, ctx.sizes["new"], ctx.sizes["repeats"], ctx.deadline, ctx.partial
    )
    return {"model": ctx.shape_name, "rows": rows}


def section_compile(ctx) -> dict:
    """Eager vs `torch.compile` static (`kvlab.measure.compiled`): the first compiled run (compiling), steady runs
    interleaved with eager ones, then a new max_cache_len (a recompile) last, as the costliest and least needed.
    Filled in as it goes (`ctx.partial`): a section cut by its limit keeps what it measured."""
    from kvlab.measure.compiled import CountingBackend, static_generate

    torch._dynamo.reset()  # forget graphs from earlier calls, so counts start at zero
    backend = CountingBackend(inductor=ctx.cuda)
    model, ids, new, length = ctx.model, ctx.ids, ctx.sizes["new"], ctx.sizes["lengths"][0]
    out = ctx.partial
    out.update(model=ctx.shape_name, max_cache_len=length, new_tokens=new)
    out["backend"] = "inductor" if ctx.cuda else "eager backend (graphs counted, not compiled: no CUDA here)"
    static_generate(model, ids, new, length)  # warm-up: first-call costs are not decoding
    eager_tokens, out["eager_seconds"] = static_generate(model, ids, new, length)
    out["runs"] = []
    for name, cache_len in (("first compiled run", length), ("same prompt again", length)):
        before = backend.graphs
        tokens, seconds = static_generate(model, ids, new, cache_len, backend)
        out["runs"].append(
            {"run": name, "max_cache_len": cache_len, "new_graphs": backend.graphs - before, "seconds": seconds}
        )
        out["same_tokens"] = out.get("same_tokens", True) and tokens == eager_tokens
    out["compile_seconds"] = out["runs"][0]["seconds"] - out["runs"][1]["seconds"]
    before = backend.graphs
    timings = timing.time_interleaved(
        {
            "eager": lambda: static_generate(model, ids, new, length),
            "compiled": lambda: static_generate(model, ids, new, length, backend),
        },
        repeats=ctx.sizes["repeats"] + 2,
        warmup=0,  # both ran above
    )
    out["steady"] = timing.compare(timings["eager"], timings["compiled"], warn=False).as_dict()
    out["steady_graphs"] = backend.graphs - before  # 0: the timed compiled runs only replayed graphs
    before = backend.graphs
    _tokens, seconds = static_generate(model, ids, new, length * 2, backend)
    run = {"run": f"max_cache_len {length * 2}", "max_cache_len": length * 2, "new_graphs": backend.graphs - before}
    out["runs"].append({**run, "seconds": seconds})
    return out


def section_offload(ctx) -> dict:
    """transformers' offloaded caches vs dynamic: tokens/s, and the bytes kvlab's trace saw move per decoded token
    (kvlab's instrumented twin of each cache, `kvlab.run`: the schedule is transformers')."""
    length = ctx.sizes["prompt"] + ctx.sizes["new"]
    configs = {
        "dynamic": ("dynamic", {}),
        "offloaded": ("offloaded", {}),
        "offloaded_static": ("offloaded_static", {"max_cache_len": length}),
    }
    result: dict = {"model": ctx.shape_name}
    if ctx.cuda:
        rows = compare_caches(
            ctx.model, ctx.ids, configs, ctx.sizes["new"], ctx.sizes["repeats"], ctx.deadline, ctx.partial
        )
    else:  # transformers' offloading needs CUDA streams: it fails on a CPU-only torch
        rows = {label: {"options": options} for label, (kind, options) in configs.items() if kind != "dynamic"}
        result["timing_skipped"] = "no CUDA device: transformers' offloading uses CUDA streams (fails on CPU)"
    for label in ("offloaded", "offloaded_static"):
        if label in rows:
            rows[label].update(offload_row(ctx, label, configs[label], rows))
    return {**result, "rows": rows}


def offload_row(ctx, label: str, config: tuple, rows: dict) -> dict:
    """The trace's bytes per decode step, and the bandwidth they imply over the measured step time."""
    kind, options = config
    try:
        run = kvlab.run(
            ctx.model,
            None,
            ctx.ids,
            cache=kind,
            max_new_tokens=ctx.sizes["new"],
            generate_kwargs={"min_new_tokens": ctx.sizes["new"]},
            **options,
        )
    except RuntimeError as err:  # a torch built for CUDA on a machine without one cannot make the copy stream
        return {"traffic_error": f"{type(err).__name__}: {err}"}
    traffic = offload_traffic(run.trace)
    row: dict = {"traffic": traffic}
    if not ctx.cuda or "step" not in rows[label] or "step" not in rows.get("dynamic", {}):
        row["bandwidth_skipped"] = "no device: the moves stay in CPU memory and copy nothing (crossed_bytes 0)"
        return row
    step, plain = rows[label]["step"]["median_s"], rows["dynamic"]["step"]["median_s"]
    # bytes per decode step over the whole step (a floor on the bandwidth), and over the time offloading adds
    row["bytes_per_s_over_step"] = traffic["bytes_per_decode_step"] / step
    extra = step - plain
    row["bytes_per_s_over_added_time"] = traffic["bytes_per_decode_step"] / extra if extra > 0 else None
    return row


def quanto_usable(ctx) -> str | None:
    """None when quanto can quantize here (its extension loaded); else why not."""
    from kvlab.caches.quantized import ensure_quanto_extension, quanto_extension_pending

    build = ctx.quanto_build
    if build is None and quanto_extension_pending(ctx.device):  # the CPU run does not wait a minute for a build
        return "quanto's C++ extension is not built on this machine (a build takes about a minute)"
    if build is not None:
        try:
            rc = build.wait(timeout=max(1.0, ctx.deadline.left() - 30))
        except subprocess.TimeoutExpired:
            build.kill()
            return "quanto's CUDA extension build did not finish in time (killed)"
        if rc != 0:
            build.log.seek(0)
            return "quanto's CUDA extension did not build: " + build.log.read()[-800:]
    ensure_quanto_extension(ctx.device)  # loads what was built (milliseconds)
    return None


def section_quantized(ctx) -> dict:
    """hqq int4, quanto int4 and fp8 against dynamic: time per token, and peak device memory beside the trace."""
    configs = {
        "dynamic": ("dynamic", {}),
        f"hqq int{NBITS}": ("quantized", {"backend": "hqq", "nbits": NBITS}),
        f"quanto int{NBITS}": ("quantized", {"backend": "quanto", "nbits": NBITS}),
        "fp8": ("quantized", {"backend": "fp8"}),
    }
    skipped_configs = {}
    refusal = quanto_usable(ctx)
    if refusal:
        skipped_configs[f"quanto int{NBITS}"] = refusal
        del configs[f"quanto int{NBITS}"]
    for label, (kind, options) in list(configs.items()):
        try:  # transformers refuses a backend it cannot run here at construction
            transformers_cache(kind, ctx.model, options)
        except (ImportError, ValueError, RuntimeError) as err:
            skipped_configs[label] = f"{type(err).__name__}: {err}"
            del configs[label]
    rows = compare_caches(
        ctx.model, ctx.ids, configs, ctx.sizes["new"], ctx.sizes["repeats"], ctx.deadline, ctx.partial
    )
    for label, row in rows.items():
        kind, options = configs[label]
        row["trace"] = summary_of(watched_trace(ctx.model, ctx.ids, kind, options, ctx.sizes["new"]))
        if ctx.cuda:
            row["device_peak_above_weights"] = row["device_max_allocated"] - ctx.weights_bytes
        else:
            row["device_memory_skipped"] = "no CUDA device: torch.cuda.max_memory_allocated measures nothing here"
    return {"model": ctx.shape_name, "rows": rows, "skipped_configs": skipped_configs}


def watch_pairs(model, ids, new_tokens: int, repeats: int, deadline) -> dict:
    """Whole runs of plain `generate` and the same inside `kvlab.watch`, in interleaved pairs."""

    def plain():
        return generate(model, ids, _compat.DynamicCache(config=model.config), new_tokens)

    def watched():
        with kvlab.watch(model):
            return plain()

    calls = {"plain": plain, "watched": watched}
    seconds: dict[str, list[float]] = {"plain": [], "watched": []}
    tokens = {label: call()["tokens"] for label, call in calls.items()}  # warm-up, and the tokens to compare
    for repeat, label in timing.interleaved(list(calls), repeats):
        if repeat > 0 and deadline.passed():
            break
        seconds[label].append(calls[label]()["seconds"])
    times = {label: timing.Timing(label, values) for label, values in seconds.items()}
    return {
        "times": {label: t.as_dict() for label, t in times.items()},
        "watched_vs_plain": timing.compare(times["plain"], times["watched"], warn=False).as_dict(),
        "same_tokens": tokens["plain"] == tokens["watched"],
    }


def section_watch_overhead(ctx) -> dict:
    return {"model": ctx.shape_name, **watch_pairs(ctx.model, ctx.ids, ctx.sizes["new"], 5, ctx.deadline)}


def section_smollm2(ctx) -> dict:
    """The small model the CPU numbers are for: dynamic vs static, and kvlab.watch's overhead."""
    model = build_model(TINY if ctx.tiny else SMOLLM2_135M, ctx.device)
    ids = prompt_ids(model, ctx.sizes["prompt"])
    configs = {"dynamic": ("dynamic", {})}
    for n in ctx.sizes["small_lengths"]:
        configs[f"static {n}"] = ("static", {"max_cache_len": n})
    rows = compare_caches(model, ids, configs, ctx.sizes["new"], ctx.sizes["repeats"], ctx.deadline, ctx.partial)
    overhead = watch_pairs(model, ids, ctx.sizes["new"], 5, ctx.deadline)
    return {"model": "tiny" if ctx.tiny else "SmolLM2-135M", "rows": rows, "watch_overhead": overhead}


# ---------------------------------------------------------------- the run

# (section, its function, seconds) in run order; each limit is also cut to what the global budget has left
SECTIONS = (
    ("static_lengths", section_static_lengths, 55),
    ("compile", section_compile, 130),
    ("offload", section_offload, 45),
    ("quantized", section_quantized, 75),
    ("watch_overhead", section_watch_overhead, 30),
    ("smollm2", section_smollm2, 35),
)
SECTION_NAMES = [name for name, _function, _limit in SECTIONS]


class Deadline:
    def __init__(self, seconds: float):
        self.seconds, self.started = seconds, timing.clock()

    def left(self) -> float:
        return self.seconds - (timing.clock() - self.started)

    def passed(self) -> bool:
        return self.left() <= 0


@contextlib.contextmanager
def hard_limit(seconds: float):
    """SIGALRM after `seconds` raises SectionTimeout in the section (a long CUDA kernel or compile is cut at its
    next Python bytecode); the section's soft deadline, earlier, stops its repeats first."""

    def expire(*_signal):
        raise SectionTimeout(f"hard limit of {seconds:.0f} s passed")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1.0))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_section(ctx, section, limit: float) -> dict:
    """One section within its limit: its result, or why it has none; never raises."""
    limit = min(limit, ctx.budget.left())
    if limit < 5:
        return {"skipped": f"the global budget had {max(limit, 0):.0f} s left"}
    ctx.deadline = Deadline(limit * 0.75)  # soft: stop repeating; the hard limit is `limit`
    ctx.partial = {}  # what a section that fills it as it goes had measured when it stopped
    started = timing.clock()
    try:
        with hard_limit(limit):
            result = section(ctx)
    except Exception as err:  # a failed section is a result: the next one still runs
        error = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}
        result = {**ctx.partial, **error}
    finally:
        with contextlib.suppress(Exception):
            torch._dynamo.reset()
            if ctx.cuda:
                torch.cuda.empty_cache()
    result["section_seconds"] = timing.clock() - started
    result["section_limit_s"] = limit
    return result


def start_quanto_build(cuda: bool):
    """quanto's CUDA extension, built in a child process while the first sections run (a minute or more; it
    cannot be interrupted in-process): the quantized section waits for it within its own limit."""
    if not cuda:
        return None
    code = "from kvlab.caches.quantized import ensure_quanto_extension as e; e('cuda')"
    env = {**os.environ, "MAX_JOBS": "6"}  # leave the other cores to the sections timed meanwhile
    command = ["nice", "-n", "19", sys.executable, "-c", code]
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a build's output could fill a pipe and stall it
    build = subprocess.Popen(command, stderr=log, stdout=log, text=True, env=env)
    build.log = log  # type: ignore[attr-defined]
    return build


def meta(args, device: str) -> dict:
    import transformers

    info = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "kvlab": kvlab.__version__,
        "device": device,
        "weights": "random bfloat16 from the config (timing and memory do not depend on the values)",
        "sizes": SIZES["tiny" if args.tiny else "full"],
        "budget_s": args.budget_s,
    }
    if device == "cuda":
        info["device_name"] = torch.cuda.get_device_name(0)
        info["device_memory"] = torch.cuda.get_device_properties(0).total_memory
    return info


class Context:
    """What every section reads: the big model, its prompt, the sizes, the clocks."""

    def __init__(self, args, device: str):
        self.tiny, self.device, self.cuda = args.tiny, device, device == "cuda"
        self.sizes = SIZES["tiny" if args.tiny else "full"]
        self.budget = Deadline(args.budget_s)
        self.deadline = self.budget
        self.partial: dict = {}
        self.shape_name = "tiny" if args.tiny else "Llama-3.1-8B"
        self.quanto_build = start_quanto_build(self.cuda) if "quantized" in args.sections else None
        self.model = build_model(TINY if args.tiny else LLAMA_31_8B, device)
        synchronize(device)
        self.weights_bytes = torch.cuda.memory_allocated() if self.cuda else None
        self.ids = prompt_ids(self.model, self.sizes["prompt"])


def summary_lines(results: dict) -> list[str]:
    """One line per comparison: the verdicts, and why a section has none."""
    lines = []
    for name, section in results["sections"].items():
        if "error" in section or "skipped" in section:
            lines.append(f"{name}: {section.get('error') or section.get('skipped')}")
        if "skipped" in section:
            continue
        rows = section.get("rows", {})
        for label, row in rows.items():
            if "step" not in row:
                continue
            verdict = next((v["verdict"] for k, v in row.items() if k.startswith("vs_")), None)
            lines.append(
                f"{name}: {label}: {1e3 * row['step']['median_s']:.2f} ms/token" + (f"; {verdict}" if verdict else "")
            )
        for label, why in section.get("skipped_configs", {}).items():
            lines.append(f"{name}: {label} skipped: {why}")
        if "timing_skipped" in section:
            lines.append(f"{name}: timing skipped: {section['timing_skipped']}")
        if "compile_seconds" in section:
            lines.append(f"{name}: compiling took {section['compile_seconds']:.1f} s; runs {section['runs']}")
        for key in ("steady", "watched_vs_plain"):
            if key in section:
                lines.append(f"{name}: {section[key]['verdict']}")
        if "watch_overhead" in section:
            lines.append(f"{name}: {section['watch_overhead']['watched_vs_plain']['verdict']}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu.json (rewritten after each section)")
    parser.add_argument("--tiny", action="store_true", help="a tiny config and tiny lengths (the CPU test)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--budget-s", type=float, default=380.0, help="the whole run's seconds, model build included")
    parser.add_argument("--sections", default=",".join(SECTION_NAMES), help="comma-separated, of: %(default)s")
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    unknown = set(args.sections) - set(SECTION_NAMES)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; valid: {SECTION_NAMES}")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(args.out) / "gpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    results = {"meta": meta(args, device), "sections": {}}
    ctx = Context(args, device)
    results["meta"]["weights_bytes"] = ctx.weights_bytes
    for name, section, limit in SECTIONS:
        if name not in args.sections:
            continue
        print(f"== {name} (limit {min(limit, ctx.budget.left()):.0f} s)", flush=True)
        results["sections"][name] = run_section(ctx, section, limit)
        write_text(out, json.dumps(results, indent=1, default=str))
    if ctx.quanto_build is not None and ctx.quanto_build.poll() is None:
        ctx.quanto_build.kill()
    results["meta"]["seconds"] = args.budget_s - ctx.budget.left()
    write_text(out, json.dumps(results, indent=1, default=str))
    print("\n".join(summary_lines(results)))
    print(f"wrote {out} in {results['meta']['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
