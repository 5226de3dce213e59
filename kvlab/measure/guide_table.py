"""The transformers cache guide's comparison table (`kvlab.measure.published.GUIDE`, speed words from its prose),
regenerated from measurements on this machine: each cell from a run and a stated rule, never from a ranking.

- sliding layers: does the cache build on a sliding-window model, its sliding layers within the window?
- offloading: does an offloading variant exist, and does its run move layers (counted as notebook 03 counts them,
  `residency.effective_moves`; and between which devices)?
- torch.compile: not measured (compiling takes tens of seconds on a CPU; notebook 02 does); the evidence is the
  number of distinct forward-input signatures over the decoding steps, what a tracing compiler meets.
- memory: peak cache bytes / the DynamicCache's (the guide's "Medium"), judged by `memory_word`.
- speed: decode seconds / the DynamicCache's with a bootstrap interval, judged by `speed_word`.

Every judged cell also names its evidence's basis (`BASES`): a run of transformers' own cache class, kvlab's CPU
stand-in for the offloaded cache (transformers' schedule, run where transformers itself refuses), or a signature
read; `tally_by_basis` counts agreement only like with like.

The cells stay English (what the rules compare and a saved run records); `word` shows one in the pt-BR guide's words.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.cache_kinds import STATIC_KINDS, offloaded_variant
from kvlab.caches import CacheOptionError
from kvlab.i18n import N_, _, cache_kind_label
from kvlab.measure.devices import log_forward_inputs
from kvlab.measure.published import GUIDE
from kvlab.measure.residency import effective_moves
from kvlab.measure.step_times import decode_step_times
from kvlab.measure.timing import Timing, compare
from kvlab.model_facts import model_facts, tokens_held
from kvlab.recorded_run import run

MEMORY_RANKS = (N_("Low"), N_("Medium"), N_("High"))  # the guide's memory words, from less than the DynamicCache
REFERENCE = "dynamic"  # every ratio is against this cache kind (the guide's "Medium")
LESS_BELOW = 0.9  # peak bytes / the DynamicCache's below this: "Low"
MORE_ABOVE = 1.1  # above this: "High"; between the two: "Medium"
TABLE_PROPERTIES = (N_("sliding layers"), N_("offloading"), "torch.compile", N_("memory"))
SPEED = N_("speed")  # the column `with_speed` adds
YES, NO = N_("Yes"), N_("No")
SLOWER, FASTER = N_("slower"), N_("faster")

# What a judged cell's evidence is, from the strongest: a run (or a refusal) of transformers' own cache class; kvlab's
# CPU stand-in for the offloaded cache (transformers refuses offloading without CUDA; `kvlab.watch` runs its schedule
# with every copy staying on the CPU); a signature read, nothing run.
MEASURED = N_("measured on transformers' own class")
STAND_IN = N_("kvlab's CPU stand-in")
SIGNATURE = N_("read from a signature")
BASES = (MEASURED, STAND_IN, SIGNATURE)

NOT_MEASURED = N_("not measured here")
NOT_DISTINGUISHABLE = N_("not distinguishable here")
REFERENCE_CELL = N_("reference")
NO_CLAIM = N_("no claim")
NOT_JUDGED = {
    REFERENCE_CELL: N_("the reference of the ratio"),
    NOT_MEASURED: N_("not measured here"),
    NOT_DISTINGUISHABLE: N_("the interval contains 1 or is too wide to tell"),
}

# The guide's prose on speed (transformers 5.x, "Cache strategies"), quoted in `says`; None: no claim about eager
# decoding speed.
GUIDE_SPEED = {
    "dynamic": {"speed": None, "says": N_("the default cache: the reference")},
    "static": {
        "speed": None,
        "says": N_(
            "compatible with JIT optimizations like torch.compile to accelerate generation "
            "(a claim about compiled decoding; eager decoding is what is timed here)"
        ),
    },
    "quantized": {"speed": SLOWER, "says": N_("Quantizing the cache can harm latency if the context length is short")},
}


def word(value: str) -> str:
    """A cell, column or cache of the table in the reader's language ("Sim", "Alto", "Cache Dinâmico": the guide's
    table writes "Cache Dinâmica" beside "Cache Estático"; kvlab keeps "o cache" masculine everywhere); anything
    else comes back as it is."""
    return _(value)


@dataclass(frozen=True)
class Setup:
    """What each measurement runs. Static caches reserve prompt + `new_tokens` + `static_room` slots, as one does
    when the final length is not known in advance."""

    new_tokens: int = 12
    static_room: int = 64
    quantized: tuple = (("backend", "quanto"), ("nbits", 4), ("residual_length", 8), ("q_group_size", 32))

    def options(self, cache_kind: str, prompt_tokens: int) -> dict:
        if cache_kind in STATIC_KINDS:
            return {"max_cache_len": prompt_tokens + self.new_tokens + self.static_room}
        if cache_kind == "quantized":
            return dict(self.quantized)
        return {}

    def run(self, model, tokenizer, ids: torch.Tensor, cache_kind: str):
        options = self.options(cache_kind, ids.shape[-1])
        return run(model, tokenizer, ids, cache=cache_kind, max_new_tokens=self.new_tokens, **options)


def measure_sliding(model, prompt_ids: torch.Tensor, cache_kind: str, setup: Setup = Setup()) -> dict:
    """Run `cache_kind` on a model with sliding layers past its window; the largest sliding and full layer after."""
    window = model_facts(model.config).sliding_window
    try:
        result = setup.run(model, None, prompt_ids, cache_kind)
    except (CacheOptionError, ValueError) as err:
        refused_by = _transformers_class_refusing(model, cache_kind)
        if refused_by is not None:  # transformers' own class refuses this model too: that refusal is the evidence
            evidence = _("refused by kvlab's check and by transformers' {cls} itself (ValueError): {error}").format(
                cls=refused_by, error=err
            )
            return {"supported": False, "evidence": evidence, "basis": MEASURED}
        return {"supported": False, "evidence": _("refused: {error}").format(error=err), "basis": None}
    layers = result.trace.layer_table()
    sliding = max(row["slots_allocated"] for row in layers if row["layer_kind"] == "sliding")
    full = max(row["slots_allocated"] for row in layers if row["layer_kind"] == "full")
    held = tokens_held(prompt_ids.shape[-1], setup.new_tokens)
    return {
        "supported": sliding <= window,
        "evidence": _(
            "{held} tokens held: sliding layers hold {sliding} slots (window {window}), full layers {full}"
        ).format(held=held, sliding=sliding, window=window, full=full),
        "basis": MEASURED,
        "live": _live(result),
    }


def _transformers_class_refusing(model, cache_kind: str) -> str | None:
    """The name of transformers' class for `cache_kind` when building it for `model`'s config raises ValueError
    (`_compat.quantized_cache_refusal`); None when it builds or when `cache_kind` has no such check."""
    if cache_kind != "quantized":
        return None
    try:
        refusal = _compat.quantized_cache_refusal(model.config)
    except Exception:  # another failure (a backend not installed) says nothing about the layers
        return None
    return None if refusal is None else "QuantizedCache"


def measure_offloading(model, prompt_ids: torch.Tensor, cache_kind: str, setup: Setup = Setup()) -> dict:
    """Run the offloading variant of `cache_kind`, if any: its layer moves, counted as notebook 03 counts them
    (`residency.effective_moves`: the transfers that change where a layer lives, not the no-op prefetches
    `offload_only_non_sliding` logs), and their devices. Where no move crossed devices the run is kvlab's CPU
    stand-in (`STAND_IN`); without a variant the evidence is the class's signature (`SIGNATURE`)."""
    offloaded = offloaded_variant(cache_kind)
    if offloaded is None:
        if "offloading" in inspect.signature(_compat.QuantizedCache.__init__).parameters:
            evidence = _("QuantizedCache takes an offloading argument and no offloaded variant exists")
            return {"supported": True, "devices": [], "evidence": evidence, "basis": SIGNATURE}
        evidence = _("QuantizedCache has no offloading argument and no offloaded variant exists")
        return {"supported": False, "devices": [], "evidence": evidence, "basis": SIGNATURE}
    result = setup.run(model, None, prompt_ids, offloaded)
    moves = effective_moves(result.trace)
    moved = sum(1 for t in moves if t["moved"])
    devices = sorted({f"{t['src']}->{t['dst']}" for t in moves})
    evidence = _("{cache_kind}: {moves} layer moves ({moved} between devices; {devices})").format(
        cache_kind=cache_kind_label(offloaded), moves=len(moves), moved=moved, devices=", ".join(devices)
    )
    if moves and not moved:
        evidence += _("; every move stayed on the CPU here, so this run shows the schedule, not a saving")
    return {
        "supported": len(moves) > 0,
        "devices": devices,
        "moved": moved,
        "moves": len(moves),
        "evidence": evidence,
        "basis": MEASURED if moved else STAND_IN,
    }


def measure_compile_and_memory(model, tokenizer, prompt, cache_kind: str, setup: Setup = Setup()) -> dict:
    """One run of `prompt` (text, or ids (1, tokens)): distinct forward signatures over the decoding steps, and the
    peak cache bytes."""
    ids = prompt if isinstance(prompt, torch.Tensor) else tokenizer(prompt, return_tensors="pt").input_ids
    with log_forward_inputs(model) as log:
        result = setup.run(model, tokenizer, ids, cache_kind)
    signatures, steps = log.decoding_signatures()
    return {
        "decode_steps": steps,
        "decode_signatures": signatures,
        "peak_bytes": result.trace.summary()["peak_bytes"],
        "live": _live(result),
    }


def _live(result) -> dict:
    """What a run's cache held, in the terms of `kvlab.size.cache_size`."""
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
    """The table, one row per cache kind, each cell with the measurement behind it. `sliding_prompt_ids` should
    pass `sliding_model`'s window; `full_model`, `tokenizer` and `prompt` drive the memory runs."""
    if REFERENCE not in kinds:
        raise ValueError(
            _("kinds must include {reference!r}: the memory column is a ratio to it; got {kinds}").format(
                reference=REFERENCE, kinds=kinds
            )
        )
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
    return [
        {"cache": row["cache"], "model": role, **live}
        for row in rows
        for role, live in row["live"].items()
        if live is not None
    ]


def memory_word(ratio: float) -> str:
    """The guide's memory word for peak bytes `ratio` times the DynamicCache's."""
    low, medium, high = MEMORY_RANKS
    if ratio < LESS_BELOW:
        return low
    if ratio > MORE_ABOVE:
        return high
    return medium


def speed_word(comparison) -> str:
    """ "slower" or "faster" than the DynamicCache when `compare(dynamic, cache)` is beyond noise, and not too noisy."""
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
        "basis": {
            "sliding layers": r["sliding"].get("basis"),
            "offloading": r["offloading"].get("basis"),
            "memory": None if reference else MEASURED,
        },
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
    """Decode seconds (first new token to last) of each plain `generate` call, {label: the guide's keywords for its
    cache}, greedy, exactly `new_tokens` after `input_ids` (1, prompt_tokens), repeats interleaved."""
    if new_tokens < 2:
        raise ValueError(
            _("new_tokens must be at least 2 (decode time needs two new tokens); got {new_tokens}").format(
                new_tokens=new_tokens
            )
        )
    timed = decode_step_times(model, input_ids, calls, new_tokens=new_tokens, repeats=repeats, warmup=warmup)
    # keyed by the calls' labels (cache kinds); each Timing named in the reader's words for its verdicts
    return {label: Timing(cache_kind_label(label), [sum(r) for r in result.runs]) for label, result in timed.items()}


def speed_cells(timings: dict[str, Timing]) -> dict[str, dict]:
    """Per cache kind: decode time / the `REFERENCE`'s, its interval, the verdict and `speed_word`'s word."""
    if REFERENCE not in timings:
        raise ValueError(
            _("timings must include the reference {reference!r}; got {timings}").format(
                reference=REFERENCE, timings=sorted(timings)
            )
        )
    cells = {}
    for kind, timing in timings.items():
        if kind == REFERENCE:
            speed, ratio, low, high, verdict = REFERENCE_CELL, 1.0, 1.0, 1.0, _("the reference of every ratio")
        else:
            c = compare(timings[REFERENCE], timing, warn=False)
            speed, ratio, low, high, verdict = speed_word(c), c.ratio, c.low, c.high, c.verdict()
        cells[kind] = {"speed": speed, "ratio": ratio, "low": low, "high": high, "verdict": verdict}
    return cells


def with_speed(rows: list[dict], timings: dict[str, Timing]) -> list[dict]:
    """The measured rows with a speed column from `timings` ({cache kind: Timing}, e.g. `time_decoding`)."""
    cells = speed_cells(timings)
    return [
        {
            **row,
            SPEED: (cell := cells[row["cache_kind"]])["speed"],
            "speed ratio": cell["ratio"],
            "speed interval": (cell["low"], cell["high"]),
            "speed verdict": cell["verdict"],
            "basis": {**row.get("basis", {}), SPEED: MEASURED},
        }
        for row in rows
    ]


def compare_with_guide(rows: list[dict]) -> list[dict]:
    """For each measured row: the guide's claim and ours, property by property (speed where a row has it). `agrees`
    is None where a cell is not judged, and `why` says why in the reader's language."""
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
            basis = None if agrees is None else row.get("basis", {}).get(prop)
            out.append(
                dict(cache=row["cache"], property=prop, guide=claim, measured=measured, agrees=agrees, why=why,
                     basis=basis)
            )  # fmt: skip
    return out


def tally(verdicts: list[dict]) -> dict:
    """How many judged cells agree and differ, and how many were not judged."""
    return {
        "agree": sum(v["agrees"] is True for v in verdicts),
        "differ": sum(v["agrees"] is False for v in verdicts),
        "judged": sum(v["agrees"] is not None for v in verdicts),
        "not judged": sum(v["agrees"] is None for v in verdicts),
        "cells": len(verdicts),
    }


def tally_by_basis(verdicts: list[dict]) -> dict[str, dict]:
    """`tally` of the judged cells, one per basis of their evidence (`BASES` order; None: a row without one), each
    with the properties it covers: agreement counted only like with like."""
    groups: dict = {}
    for v in verdicts:
        if v["agrees"] is not None:
            groups.setdefault(v.get("basis"), []).append(v)
    order = [b for b in BASES if b in groups] + [b for b in groups if b not in BASES]
    return {
        basis: {**tally(groups[basis]), "properties": list(dict.fromkeys(v["property"] for v in groups[basis]))}
        for basis in order
    }


def calculated_for(trace, arch, prompt_tokens: int, cache_config: dict | None = None):
    """`kvlab.size.cache_size` for the cache a watched `generate` used: a static cache's `max_cache_len` is the
    slots its layers allocated (generate sizes it itself), a quantized cache's options the `cache_config` it got."""
    from kvlab.size import cache_size  # kvlab.size is heavier than this module's other imports

    cache_kind, final = trace.meta["cache_kind"], trace.final_layers()
    options = {}
    if cache_kind in STATIC_KINDS:
        options = {"max_cache_len": final[0]["slots_allocated"]}
    elif cache_kind == "quantized":
        options = dict(cache_config or {})
    tokens = max(layer["logical_length"] for layer in final)
    dtype = trace.meta.get("dtype", "float32")
    return cache_size(arch, cache_kind, tokens, prefill=prompt_tokens, dtype=dtype, **options)
