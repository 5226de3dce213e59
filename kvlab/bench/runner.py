"""`run_bench`: every configuration in one process, repeats interleaved (repeat r of every configuration before
repeat r+1, so machine drift hits all alike), medians, quality, roofline; and why a configuration cannot run
here (`unsupported_reason`: kvlab's request rules, and transformers' own words where it has them).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field

import torch

from kvlab import _compat
from kvlab.bench.configs import GUIDE, BenchConfig, default_configs
from kvlab.cache_kinds import quantized_backend
from kvlab.caches.factory import make_cache
from kvlab.caches.quantized import ensure_quanto_extension
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.measure import quality, roofline, timing
from kvlab.measure.compiled import compile_runs, compile_summary
from kvlab.measure.text import token_windows
from kvlab.model_facts import tokens_held
from kvlab.recorded_run import pad_token_id, run
from kvlab.request import Request
from kvlab.rules import check


@dataclass(frozen=True)
class BenchSettings:
    model: str = "smollm2"
    prompt_tokens: int = 128
    new_tokens: int = 32
    repeats: int = 3
    quality_windows: int = 2
    seed: int = 0
    compile: bool = False
    dtype: str = "float32"
    threads: int | None = None  # CPU threads for torch; 1 is far faster than 2 on a CPU other jobs share

    def check(self) -> None:
        for name in ("prompt_tokens", "new_tokens", "repeats", "quality_windows"):
            if getattr(self, name) < 1:
                raise ValueError(_("{name} must be at least 1; got {got}").format(name=name, got=getattr(self, name)))
        if self.new_tokens < 2:
            raise ValueError(_("new_tokens must be at least 2 (decode speed needs two decoded tokens)"))


def transformers_reason(model, config: BenchConfig) -> str | None:
    """The error transformers' own cache class raises for this configuration at construction, if any."""
    if config.cache_kind != "quantized":
        return None
    try:
        return _compat.quantized_cache_refusal(model.config, **config.options)  # its backend, or kvlab's default
    except ImportError as err:  # the backend's package missing: transformers' words too
        return str(err)


def unsupported_reason(model, config: BenchConfig, prompt_tokens: int, new_tokens: int) -> str | None:
    """None when the configuration can run; otherwise kvlab's reason and, if it has one, transformers'."""
    if config.plain:
        return None  # plain configurations report the error of their first run
    request = Request(
        config.cache_kind,
        dict(config.options),
        model.config,
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        dtype=model.dtype,
        device=model.device,
        generate_sizes=True,
    )
    try:
        check(request)
    except KvlabUserError as err:  # an option, or the memory or positions this request needs
        theirs = transformers_reason(model, config)
        return f"transformers: {theirs} (kvlab: {err})" if theirs else f"kvlab: {err}"
    return None


def generate_once(
    model, tokenizer, config: BenchConfig, ids: torch.Tensor, new_tokens: int, clock: timing.DecodeClock | None = None
) -> dict:
    """One greedy generation of exactly `new_tokens` tokens; timing, tokens and (instrumented) the trace. `clock`:
    the streamer that times it (a new `DecodeClock` by default; bench/watch_lockstep.py passes one that takes turns)."""
    clock = timing.DecodeClock() if clock is None else clock
    ids = ids.to(model.device)
    cuda = ids.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    kwargs = {"streamer": clock, "min_new_tokens": new_tokens}
    if config.plain:  # transformers' own cache class, no kvlab recording
        cache = _compat.DynamicCache(config=model.config, offloading=config.cache_kind == "offloaded")
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=pad_token_id(tokenizer, model),
                **kwargs,
                **{_compat.CACHE_KWARG: cache},
            )
        tokens, trace = out[0, ids.shape[-1] :].tolist(), None
    else:
        result = run(
            model,
            tokenizer,
            ids,
            cache=config.cache_kind,
            max_new_tokens=new_tokens,
            generate_kwargs=kwargs,
            **config.options,
        )
        tokens, trace = result.generated_token_ids, result.trace
    clock.end()
    return {
        "decode_tokens_per_s": clock.decode_tokens_per_s,
        "prefill_seconds": clock.prefill_seconds,
        "seconds": clock.ended - clock.started,
        "tokens": tokens,
        "trace": trace,
        "device_max_allocated": torch.cuda.max_memory_allocated() if cuda else None,
    }


def measure_quality(model, config: BenchConfig, windows: list[torch.Tensor], prefill: int) -> torch.Tensor:
    """Teacher-forced log-probabilities over all windows, concatenated: (windows * continuation, vocab)."""
    parts = []
    for ids in windows:
        cache = None if config.cache_kind == "none" else make_cache(config.cache_kind, model.config, **config.options)
        parts.append(quality.teacher_forced_logits(model, ids, prefill, cache))
    return torch.cat(parts)


def builds_extension(config: BenchConfig) -> bool:
    """Whether the configuration's backend compiles an extension on first use (quanto's, `ensure_quanto_extension`)."""
    backend = quantized_backend(config.cache_kind, config.options)
    return backend is not None and backend.builds_extension


def _progress(total: int, enabled: bool, description: str):
    from tqdm.auto import tqdm

    # smoothing=0: the rate (and so the ETA) is the completed work over the elapsed time, recomputed at each redraw
    return tqdm(total=total, disable=not enabled, desc=description, unit="run", leave=True, smoothing=0)


class Ticker:
    """Shows what the bench is doing and for how long: `start(label)` at each piece of work; a daemon thread
    redraws the bar every `interval` seconds, so its elapsed time and ETA keep moving through a long one."""

    def __init__(self, bar, interval: float = 1.0):
        self.bar, self.interval = bar, interval
        self.current = ("", timing.clock())  # (label, when it started): replaced whole, read whole by the thread
        self._stop = threading.Event()
        self._thread = None if bar.disable else threading.Thread(target=self._redraw, daemon=True)

    def __enter__(self) -> Ticker:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def start(self, label: str) -> None:
        self.current = (label, timing.clock())
        self.tick()

    def tick(self) -> None:
        label, started = self.current
        self.bar.set_postfix_str(f"{label} ({timing.clock() - started:.0f} s)")  # redraws the bar

    def _redraw(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()


@dataclass
class Measured:
    """What `run_bench` measured, by configuration label: the material of the rows."""

    runs: dict[str, list[dict]]  # every timed repeat's `generate_once`
    log_probs: dict[str, torch.Tensor] = field(default_factory=dict)  # (windows * continuation, vocab)
    targets: torch.Tensor | None = None  # the quality windows' continuations
    compiled: dict | None = None  # `compile_summary`, with --compile
    bandwidth: float = 0.0  # bytes/s
    weights: int = 0  # bytes


def run_bench(
    model, tokenizer, settings: BenchSettings, configs: list[BenchConfig] | None = None, progress: bool = True
) -> dict:
    """Measure every configuration; returns {"meta": ..., "rows": [...], "overhead": ..., "roofline": ...}."""
    settings.check()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    configs = configs or default_configs(settings.prompt_tokens, settings.new_tokens, settings.compile)
    device = model.device
    length = settings.prompt_tokens + settings.new_tokens
    windows = [w.to(device) for w in token_windows(tokenizer, length, settings.quality_windows + 1, settings.seed)]
    prompt = windows[0][:, : settings.prompt_tokens]  # (1, prompt_tokens): the timed generation's prompt
    reasons = {c.label: unsupported_reason(model, c, settings.prompt_tokens, settings.new_tokens) for c in configs}
    timed = [c for c in configs if reasons[c.label] is None and not c.compile]
    scored = [c for c in timed if not c.plain]
    if any(builds_extension(c) for c in timed):
        ensure_quanto_extension(device)  # before the bar and every clock: its one-time build is no one's timing
    total = len(timed) * settings.repeats + len(scored) + (1 if settings.compile else 0) + 1
    bar = _progress(total, progress, f"kvlab bench {settings.model}")
    with Ticker(bar) as ticker:
        measured = Measured(_time_runs(model, tokenizer, timed, prompt, settings, reasons, ticker))
        measured.targets = torch.cat([w[0, settings.prompt_tokens :] for w in windows[1:]]).cpu()
        for config in scored:
            ticker.start(f"quality {config.label}")
            if reasons[config.label] is None:
                logp = measure_quality(model, config, windows[1:], settings.prompt_tokens)
                measured.log_probs[config.label] = logp.cpu()
            bar.update(1)
        if settings.compile:
            ticker.start("torch.compile")
            shorter = windows[1][:, : max(settings.prompt_tokens // 2, 1)]
            try:
                runs = compile_runs(
                    model, [prompt, prompt, shorter], settings.new_tokens, pad_token_id(tokenizer, model)
                )
                measured.compiled = compile_summary(runs)
            except Exception as err:
                reasons |= {c.label: f"{type(err).__name__}: {err}" for c in configs if c.compile}
            bar.update(1)
        ticker.start("memory bandwidth")
        measured.bandwidth = roofline.measure_bandwidth(device=device.type)
        measured.weights = roofline.weight_bytes(model)
        bar.update(1)
    bar.close()
    return _result(assemble_rows(configs, reasons, measured, settings), measured, settings, device)


def _time_runs(model, tokenizer, timed, prompt, settings, reasons, ticker) -> dict[str, list[dict]]:
    """Every repeat of every timed configuration, interleaved; a configuration that fails is given its reason."""
    runs: dict[str, list[dict]] = {c.label: [] for c in timed}
    by_label = {c.label: c for c in timed}
    for _round, label in timing.interleaved(list(by_label), settings.repeats):
        ticker.start(label)
        if reasons.get(label) is None:
            try:
                runs[label].append(generate_once(model, tokenizer, by_label[label], prompt, settings.new_tokens))
            except Exception as err:  # a configuration that fails here is reported, not fatal
                reasons[label] = f"{type(err).__name__}: {err}"
        ticker.bar.update(1)
    return runs


def _result(rows: list[dict], measured: Measured, settings: BenchSettings, device) -> dict:
    plain, instrumented = (_median_of(measured.runs, label) for label in ("dynamic (plain transformers)", "dynamic"))
    overhead = {
        "instrumented_decode_tokens_per_s": instrumented,
        "plain_decode_tokens_per_s": plain,
        "time_ratio": plain / instrumented if plain and instrumented else None,
        "how": "instrumented vs plain transformers DynamicCache, same run, interleaved repeats, median decode "
        "tokens/s; time_ratio = instrumented time / plain time",
    }
    meta = {
        **asdict(settings),
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "transformers": _compat.TRANSFORMERS_VERSION,
        "text": "pydoc_data.topics (sorted topics), seeded windows",
        "tokens_in_cache": tokens_held(settings.prompt_tokens, settings.new_tokens),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return {
        "meta": meta,
        "rows": rows,
        "overhead": overhead,
        "compile": measured.compiled,
        "roofline": {"bandwidth_bytes_per_s": measured.bandwidth, "weight_bytes": measured.weights},
    }


def _median_of(runs: dict, label: str, key: str = "decode_tokens_per_s") -> float | None:
    values = [r[key] for r in runs.get(label, []) if r.get(key) is not None]
    return timing.median(values) if values else None


def _decode_timing(runs: dict, label: str) -> timing.Timing:
    """Seconds per decoded token of every repeat of `label`, for a median, a spread and a ratio interval."""
    speeds = [r["decode_tokens_per_s"] for r in runs.get(label, [])]
    return timing.Timing(label, [1 / s for s in speeds if s and s == s])


def _agreement(reference: list[int], other: list[int]) -> tuple[float, int]:
    """(share of greedy positions with dynamic's token, NaN with none to compare; tokens identical to dynamic's)."""
    same = quality.token_agreement(reference, other)
    return (same["agreement"] if same["tokens"] else float("nan")), same["common_prefix"]


def assemble_rows(configs, reasons: dict, measured: Measured, settings: BenchSettings) -> list[dict]:
    """One dict per configuration, every number relative to the instrumented dynamic cache where it says so."""
    runs = measured.runs
    reference = runs["dynamic"][0] if runs.get("dynamic") else {}
    ref_logp = measured.log_probs.get("dynamic")
    ref = {
        "tokens": reference.get("tokens", []),
        "peak": reference["trace"].summary()["peak_bytes"] if reference.get("trace") else None,
        "speed": _median_of(runs, "dynamic"),
        "time": _decode_timing(runs, "dynamic"),
        "logp": ref_logp,
        "ppl": quality.perplexity(ref_logp, measured.targets) if ref_logp is not None else None,
    }
    rows = []
    for config in configs:
        row = {**config.to_dict(), **{f"guide_{k}": v for k, v in GUIDE.get(config.cache_kind, {}).items()}}
        if config.compile:
            row["guide_compile"] = "yes"
        if reasons.get(config.label):
            rows.append({**row, "status": "unsupported", "unsupported": reasons[config.label]})
        elif config.compile and measured.compiled is None:
            rows.append({**row, "status": "not run", "note": "pass --compile to measure"})
        elif config.compile:
            rows.append({**row, "status": "measured", **_compiled_cells(measured.compiled, ref, settings)})
        else:
            rows.append({**row, "status": "measured", **_timed_cells(config.label, measured, ref, settings)})
    return rows


def _compiled_cells(compiled: dict, ref: dict, settings: BenchSettings) -> dict:
    steady = [c for c in compiled["calls"][1:] if c["graphs_compiled"] == 0]
    agreement, identical = _agreement(ref["tokens"], compiled["first_call_tokens"])
    return {
        "compile_seconds": compiled["compile_seconds"],
        "recompiles_per_call": compiled["recompiles_per_call"],
        "tokens_per_s_with_prefill": settings.new_tokens / steady[0]["seconds"] if steady else None,
        "greedy_agreement": agreement,
        "greedy_identical_prefix": identical,
        "note": "transformers' StaticCache (compiled); bytes as the static row",
    }


def _timed_cells(label: str, measured: Measured, ref: dict, settings: BenchSettings) -> dict:
    first = measured.runs[label][0]
    speed = _median_of(measured.runs, label)
    agreement, identical = _agreement(ref["tokens"], first["tokens"])
    per_token = _decode_timing(measured.runs, label)
    versus = timing.compare(ref["time"], per_token, warn=False) if ref["time"].times and per_token.times else None
    cells = {
        "decode_tokens_per_s": speed,
        "decode_seconds_per_token": per_token.as_dict(),
        "decode_time_vs_dynamic": versus.as_dict() if versus else None,
        "prefill_seconds": _median_of(measured.runs, label, "prefill_seconds"),
        "tokens_per_s_ratio_vs_dynamic": speed / ref["speed"] if speed and ref["speed"] else None,
        "greedy_agreement": agreement,
        "first_divergence": quality.first_divergence(ref["tokens"], first["tokens"]),
        "greedy_identical_prefix": identical,
        "device_max_allocated": first["device_max_allocated"],
    }
    if first["trace"] is not None:
        summary = first["trace"].summary()
        ceiling = roofline.roofline_tokens_per_s(
            measured.bandwidth, measured.weights, roofline.mean_decode_cache_bytes(first["trace"])
        )
        cells |= {
            "peak_cache_bytes": summary["peak_bytes"],
            "final_cache_bytes": summary["final_bytes"],
            "bytes_per_token": summary["peak_bytes"] / tokens_held(settings.prompt_tokens, settings.new_tokens),
            "ratio_vs_dynamic": summary["peak_bytes"] / ref["peak"] if ref["peak"] else None,
            "transfers": summary["transfers"],
            "transfer_bytes": summary["transfer_bytes"],
            "flushes": summary["flushes"],
            "roofline_tokens_per_s": ceiling,
            "roofline_fraction": speed / ceiling if speed else None,
        }
    if label in measured.log_probs:
        logp = measured.log_probs[label]
        ppl = quality.perplexity(logp, measured.targets)
        cells |= {
            "perplexity": ppl,
            "perplexity_delta_pct": 100 * (ppl / ref["ppl"] - 1) if ref["ppl"] else None,
            "logit_kl_vs_dynamic": quality.kl_divergence(ref["logp"], logp) if ref["logp"] is not None else None,
        }
    return cells
