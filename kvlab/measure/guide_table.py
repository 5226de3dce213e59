"""The transformers cache guide's comparison table, regenerated from measurements on this machine.

The guide ("Cache strategies") rates three caches on four properties (`kvlab.measure.published.GUIDE`), and its
prose adds speed words (`GUIDE_SPEED`). Each cell here comes from a run and a stated rule, never from a ranking:
- sliding layers: on a model with sliding-window layers, does the cache build, and do its sliding layers stay
  within the window while the full layers keep every token?
- offloading: does an offloading variant of the cache exist, and does a run log layer transfers? The evidence
  names the devices the transfers went between (on a machine without an accelerator: CPU->CPU, nothing saved).
- torch.compile: not measured here (`NOT_MEASURED`): compiling takes tens of seconds on a CPU; notebook 02 and
  `kvlab.measure.compiled` compile for real. The evidence beside it is the number of distinct forward-input
  signatures over the decoding steps (`kvlab.measure.devices.log_forward_inputs`): what a tracing compiler
  meets, not what it compiled.
- memory: peak cache bytes of the same generation, divided by the DynamicCache's. The guide's words are relative
  to its "Medium" DynamicCache, so the rule is `memory_word`: under `LESS_BELOW` is "Low", over `MORE_ABOVE`
  "High", between "Medium". The DynamicCache's own cell is the reference of the ratio and is not judged.
- speed: decode seconds (first new token to last, `DecodeClock`) of each guide call, interleaved repeats,
  divided by the DynamicCache's, with a bootstrap interval (`kvlab.measure.timing.compare`). The rule is
  `speed_word`: "slower"/"faster" only when the interval lies on one side of 1 and is not too wide, else
  `NOT_DISTINGUISHABLE`; a cell is judged only where the guide makes a claim and the verdict is beyond noise.

`compare_with_guide` judges each cell by these rules: `agrees` is True, False, or None (not judged, with why).

The cells' words stay English in every row (the guide's "Yes", "Medium"...): they are what the rules compare and
what a saved run records. `word` shows one in the reader's language, in the pt-BR guide's words ("Sim",
"Médio"); the sentences beside them (evidence, why) are written in that language when they are measured.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.cache_kinds import STATIC_KINDS, offloaded_variant
from kvlab.caches import CacheOptionError
from kvlab.i18n import N_, _
from kvlab.measure.devices import log_forward_inputs
from kvlab.measure.published import GUIDE
from kvlab.measure.step_times import decode_step_times
from kvlab.measure.timing import Timing, compare
from kvlab.model_facts import model_facts, tokens_held
from kvlab.recorded_run import run

MEMORY_RANKS = (
    N_("Low"),
    N_("Medium"),
    N_("High"),
)  # the guide's memory words, from less than the DynamicCache to more
REFERENCE = "dynamic"  # every ratio is against this cache kind (the guide's "Medium")
LESS_BELOW = 0.9  # peak bytes / the DynamicCache's below this: "Low"
MORE_ABOVE = 1.1  # above this: "High"; between the two: "Medium"
TABLE_PROPERTIES = (N_("sliding layers"), N_("offloading"), "torch.compile", N_("memory"))
SPEED = N_("speed")  # the column `with_speed` adds
YES, NO = N_("Yes"), N_("No")
SLOWER, FASTER = N_("slower"), N_("faster")

NOT_MEASURED = N_("not measured here")
NOT_DISTINGUISHABLE = N_("not distinguishable here")
REFERENCE_CELL = N_("reference")
NO_CLAIM = N_("no claim")
NOT_JUDGED = {
    REFERENCE_CELL: N_("the reference of the ratio"),
    NOT_MEASURED: N_("not measured here"),
    NOT_DISTINGUISHABLE: N_("the interval contains 1 or is too wide to tell"),
}

# The guide's speed words. Its table has no speed column; these are its prose (transformers 5.x, "Cache
# strategies"), quoted in `says`. None: the guide makes no claim about eager decoding speed for that cache.
GUIDE_SPEED = {
    "dynamic": {"speed": None, "says": N_("the default cache: the reference")},
    "static": {
        "speed": None,
        "says": N_(
            "compatible with JIT optimizations like torch.compile to accelerate generation "
            "(a claim about compiled decoding; eager decoding is what is timed here)"
        ),
    },
    "quantized": {
        "speed": SLOWER,
        "says": N_("Quantizing the cache can harm latency if the context length is short"),
    },
}


def word(value: str) -> str:
    """A word of the table in the reader's language: a cell ("Yes", "High", "not measured here", "slower"), a
    column ("sliding layers") or a cache ("Dynamic Cache"), in the pt-BR guide's words ("Sim", "Alto", "Cache
    Dinâmica"). The rows keep the English word, which the rules compare; anything else comes back as it is."""
    return _(value)


@dataclass(frozen=True)
class Setup:
    """What each measurement runs. Static caches reserve `max_cache_len` = prompt + `new_tokens` + `static_room`, as
    one does when the final length is not known in advance: `static_room + 1` slots more than the prompt +
    `new_tokens` - 1 tokens the run holds (the last new token is never fed back). The quantized cache keeps
    `residual_length` tokens in full precision and quantizes the rest."""

    new_tokens: int = 12
    static_room: int = 64
    quantized: tuple = (("backend", "quanto"), ("nbits", 4), ("residual_length", 8), ("q_group_size", 32))

    def options(self, cache_kind: str, prompt_tokens: int) -> dict:
        if cache_kind in STATIC_KINDS:
            return {"max_cache_len": prompt_tokens + self.new_tokens + self.static_room}
        if cache_kind == "quantized":
            return dict(self.quantized)
        return {}


def measure_sliding(model, prompt_ids: torch.Tensor, cache_kind: str, setup: Setup = Setup()) -> dict:
    """Run `cache_kind` on a model with sliding layers past its window; the largest sliding and full layer
    afterwards."""
    window = model_facts(model.config).sliding_window
    try:
        result = run(
            model,
            None,
            prompt_ids,
            cache=cache_kind,
            max_new_tokens=setup.new_tokens,
            **setup.options(cache_kind, prompt_ids.shape[-1]),
        )
    except (CacheOptionError, ValueError) as err:
        return {"supported": False, "evidence": _("refused: {error}").format(error=err)}
    layers = result.trace.layer_table()
    sliding = max(row["slots_allocated"] for row in layers if row["layer_kind"] == "sliding")
    full = max(row["slots_allocated"] for row in layers if row["layer_kind"] == "full")
    held = tokens_held(prompt_ids.shape[-1], setup.new_tokens)
    return {
        "supported": sliding <= window,
        "evidence": _(
            "{held} tokens held: sliding layers hold {sliding} slots (window {window}), full layers {full}"
        ).format(held=held, sliding=sliding, window=window, full=full),
        "live": _live(result),
    }


def measure_offloading(model, prompt_ids: torch.Tensor, cache_kind: str, setup: Setup = Setup()) -> dict:
    """Run the offloading variant of `cache_kind`, if transformers has one, and count the logged layer transfers
    and the devices they went between."""
    offloaded = offloaded_variant(cache_kind)
    if offloaded is None:
        takes = "offloading" in inspect.signature(_compat.QuantizedCache.__init__).parameters
        evidence = (
            _("QuantizedCache takes an offloading argument and no offloaded variant exists")
            if takes
            else _("QuantizedCache has no offloading argument and no offloaded variant exists")
        )
        return {"supported": takes, "devices": [], "evidence": evidence}
    result = run(
        model,
        None,
        prompt_ids,
        cache=offloaded,
        max_new_tokens=setup.new_tokens,
        **setup.options(offloaded, prompt_ids.shape[-1]),
    )
    transfers = result.trace.transfers
    moved = sum(1 for t in transfers if t["moved"])
    devices = sorted({f"{t['src']}->{t['dst']}" for t in transfers})
    evidence = _("{cache_kind}: {transfers} layer transfers ({moved} between devices; {devices})").format(
        cache_kind=offloaded, transfers=len(transfers), moved=moved, devices=", ".join(devices)
    )
    if transfers and not moved:
        evidence += _("; every transfer stayed on its device here, so this run shows the schedule, not a saving")
    return {"supported": len(transfers) > 0, "devices": devices, "moved": moved, "evidence": evidence}


def measure_compile_and_memory(model, tokenizer, prompt, cache_kind: str, setup: Setup = Setup()) -> dict:
    """One run: distinct forward signatures over the decoding steps, and the peak cache bytes.

    `prompt` is text (encoded with `tokenizer`) or ids of shape (1, tokens)."""
    ids = prompt if isinstance(prompt, torch.Tensor) else tokenizer(prompt, return_tensors="pt").input_ids
    with log_forward_inputs(model) as log:
        result = run(
            model,
            tokenizer,
            ids,
            cache=cache_kind,
            max_new_tokens=setup.new_tokens,
            **setup.options(cache_kind, ids.shape[-1]),
        )
    decode = log.signatures()[1:]  # call 0 is the prefill
    return {
        "decode_steps": len(decode),
        "decode_signatures": len(set(decode)),
        "peak_bytes": result.trace.summary()["peak_bytes"],
        "live": _live(result),
    }


def _live(result) -> dict:
    """What a run's cache held, in the terms of `kvlab.size.cache_size`: tokens fed (the last new token never
    is), the prefill, the options, and the bytes at the end and at the peak."""
    summary = result.trace.summary()
    return {
        "cache_kind": result.cache,
        "options": dict(result.options),
        "prefill": result.prompt_tokens,
        "tokens": tokens_held(result.prompt_tokens, len(result.generated_token_ids)),
        "final_bytes": summary["final_bytes"],
        "peak_bytes": summary["peak_bytes"],
    }


def measure(
    sliding_model,
    full_model,
    tokenizer,
    prompt,
    sliding_prompt_ids: torch.Tensor,
    kinds=("dynamic", "static", "quantized"),
    setup: Setup = Setup(),
) -> list[dict]:
    """The table, one row per cache kind, each cell with the measurement behind it.

    `sliding_model` has sliding-window layers (the prompt should pass its window); `full_model`/`tokenizer`/
    `prompt` drive the memory runs. `kinds` must include the DynamicCache (`REFERENCE`): memory is a ratio to it.
    """
    if REFERENCE not in kinds:
        raise ValueError(f"kinds must include {REFERENCE!r}: the memory column is a ratio to it; got {kinds}")
    rows = []
    for cache_kind in kinds:
        sliding = measure_sliding(sliding_model, sliding_prompt_ids, cache_kind, setup)
        offload = measure_offloading(sliding_model, sliding_prompt_ids[:, :4], cache_kind, setup)
        run_facts = measure_compile_and_memory(full_model, tokenizer, prompt, cache_kind, setup)
        rows.append({"cache_kind": cache_kind, "sliding": sliding, "offloading": offload, **run_facts})
    reference = next(r["peak_bytes"] for r in rows if r["cache_kind"] == REFERENCE)
    return [_row(r, r["peak_bytes"] / reference) for r in rows]


def live_runs(rows: list[dict]) -> list[dict]:
    """Every live cache behind a measured table, labelled by model role: for checking a size calculator."""
    out = []
    for row in rows:
        for model_role, live in row["live"].items():
            if live is not None:
                out.append({"cache": row["cache"], "model": model_role, **live})
    return out


def memory_word(ratio: float) -> str:
    """The guide's memory word for peak bytes `ratio` times the DynamicCache's (the guide's "Medium")."""
    low, medium, high = MEMORY_RANKS
    if ratio < LESS_BELOW:
        return low
    if ratio > MORE_ABOVE:
        return high
    return medium


def speed_word(comparison) -> str:
    """ "slower" or "faster" than the DynamicCache when `comparison` (`compare(dynamic, cache)`) is beyond noise
    and not too noisy; else `NOT_DISTINGUISHABLE`."""
    if comparison.too_noisy or not comparison.differs:
        return NOT_DISTINGUISHABLE
    return SLOWER if comparison.ratio > 1 else FASTER


def _row(r: dict, memory_ratio: float) -> dict:
    reference = r["cache_kind"] == REFERENCE
    return {
        "cache": GUIDE[r["cache_kind"]]["cache"],
        "cache_kind": r["cache_kind"],
        "sliding layers": YES if r["sliding"]["supported"] else NO,
        "offloading": YES if r["offloading"]["supported"] else NO,
        "torch.compile": NOT_MEASURED,
        "memory": REFERENCE_CELL if reference else memory_word(memory_ratio),
        "memory ratio": memory_ratio,
        "sliding evidence": r["sliding"]["evidence"],
        "offloading evidence": r["offloading"]["evidence"],
        "offloading devices": r["offloading"]["devices"],
        "compile evidence": (
            _(
                "{signatures} distinct forward signature over {steps} decoding steps "
                "(what a tracing compiler meets; no compile ran here)"
            )
            if r["decode_signatures"] == 1
            else _(
                "{signatures} distinct forward signatures over {steps} decoding steps "
                "(what a tracing compiler meets; no compile ran here)"
            )
        ).format(signatures=r["decode_signatures"], steps=r["decode_steps"]),
        "peak cache bytes": r["peak_bytes"],
        "live": {"sliding model": r["sliding"].get("live"), "full model": r["live"]},
    }


def time_decoding(
    model, input_ids: torch.Tensor, calls: dict[str, dict], new_tokens: int, repeats: int = 5, warmup: int = 1
) -> dict[str, Timing]:
    """Decode seconds of each `generate` call, {label: generate keyword arguments}, repeats interleaved.

    Each call is plain transformers (no kvlab recording): greedy, exactly `new_tokens` tokens after `input_ids`
    (1, prompt_tokens), with the keywords the guide gives for its cache (`{}`, `cache_implementation="static"`,
    ...). Timed by `kvlab.measure.step_times` from the first new token to the last: `new_tokens - 1` decoding
    forwards, the prefill left out. `warmup` untimed calls of each come first."""
    if new_tokens < 2:
        raise ValueError(f"new_tokens must be at least 2 (decode time needs two new tokens); got {new_tokens}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}")
    timed = decode_step_times(model, input_ids, calls, new_tokens=new_tokens, repeats=repeats, warmup=warmup)
    return {
        label: Timing(label, [sum(run) for run in result.runs], work={"decode_forwards": new_tokens - 1})
        for label, result in timed.items()
    }


def speed_cells(timings: dict[str, Timing], reference: str = REFERENCE) -> dict[str, dict]:
    """Per cache kind: decode time / the reference's, its interval, the verdict and the word `speed_word` gives
    (`REFERENCE_CELL` for the reference itself)."""
    if reference not in timings:
        raise ValueError(f"timings must include the reference {reference!r}; got {sorted(timings)}")
    cells = {}
    for kind, timing in timings.items():
        if kind == reference:
            cells[kind] = {
                "speed": REFERENCE_CELL,
                "ratio": 1.0,
                "low": 1.0,
                "high": 1.0,
                "verdict": _("the reference of every ratio"),
            }
            continue
        comparison = compare(timings[reference], timing, warn=False)
        cells[kind] = {
            "speed": speed_word(comparison),
            "ratio": comparison.ratio,
            "low": comparison.low,
            "high": comparison.high,
            "verdict": comparison.verdict(),
        }
    return cells


def with_speed(rows: list[dict], timings: dict[str, Timing]) -> list[dict]:
    """The measured rows with a speed column from `timings` ({cache kind: Timing}, e.g. `time_decoding`)."""
    cells = speed_cells(timings)
    out = []
    for row in rows:
        cell = cells[row["cache_kind"]]
        out.append(
            {
                **row,
                SPEED: cell["speed"],
                "speed ratio": cell["ratio"],
                "speed interval": (cell["low"], cell["high"]),
                "speed verdict": cell["verdict"],
            }
        )
    return out


def compare_with_guide(rows: list[dict]) -> list[dict]:
    """For each measured row: the guide's claim and ours, property by property, judged by the rules above.

    The four table columns always; "speed" where a row has it (the guide's prose, `GUIDE_SPEED`). `agrees` is
    None where a cell is not judged: the reference of a ratio, not measured, not beyond noise, or no claim by the
    guide; `why` says which, in the reader's language (the other fields are the English words: `word` shows them)."""
    by_name = {g["cache"]: (kind, g) for kind, g in GUIDE.items()}
    out = []
    for row in rows:
        kind, guide = by_name[row["cache"]]
        claims = {prop: guide[prop] for prop in TABLE_PROPERTIES}
        if SPEED in row:
            claims[SPEED] = GUIDE_SPEED[kind]["speed"] or NO_CLAIM
        for prop, claim in claims.items():
            measured = row[prop]
            if measured in NOT_JUDGED:
                agrees, why = None, _(NOT_JUDGED[measured])
            elif claim == NO_CLAIM:
                agrees, why = None, _("the guide makes no claim: {says}").format(says=_(GUIDE_SPEED[kind]["says"]))
            else:
                agrees, why = claim == measured, _("same word") if claim == measured else _("a different word")
            out.append(
                {
                    "cache": row["cache"],
                    "property": prop,
                    "guide": claim,
                    "measured": measured,
                    "agrees": agrees,
                    "why": why,
                }
            )
    return out


def tally(verdicts: list[dict]) -> dict:
    """How many judged cells agree and differ, and how many were not judged: counted, never assumed."""
    return {
        "agree": sum(v["agrees"] is True for v in verdicts),
        "differ": sum(v["agrees"] is False for v in verdicts),
        "judged": sum(v["agrees"] is not None for v in verdicts),
        "not judged": sum(v["agrees"] is None for v in verdicts),
        "cells": len(verdicts),
    }


def calculated_for(trace, arch, prompt_tokens: int, cache_config: dict | None = None):
    """`kvlab.size.cache_size` for the cache a watched `generate` used (`kvlab.watch(...).trace`).

    The cache kind comes from the trace; a static cache's `max_cache_len` is the slots its layers allocated (generate
    sizes it itself); a quantized cache takes the `cache_config` it was built with. Tokens are those the cache
    holds at the end (the last new token is never fed back)."""
    from kvlab.size import cache_size  # kvlab.size is heavier than this module's other imports

    cache_kind = trace.meta["cache_kind"]
    first = trace.final_layers()[0]
    options = {}
    if cache_kind in STATIC_KINDS:
        options = {"max_cache_len": first["slots_allocated"]}
    elif cache_kind == "quantized":
        options = dict(cache_config or {})
    tokens = max(layer["logical_length"] for layer in trace.final_layers())
    return cache_size(
        arch, cache_kind, tokens, prefill=prompt_tokens, dtype=trace.meta.get("dtype", "float32"), **options
    )
