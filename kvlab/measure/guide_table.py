"""The transformers cache guide's comparison table, regenerated from measurements on this machine.

The guide ("Cache strategies") rates three caches on four properties (`kvlab.measure.published.GUIDE`). Each
claim here is replaced by a run:
- sliding layers: on a model with sliding-window layers, does the cache build, and do its sliding layers stay
  within the window while the full layers keep every token?
- offloading: does an offloading variant of the cache exist, and does a run log layer transfers?
- torch.compile: over the decoding steps, how many distinct forward-input signatures (shapes, dtypes, devices)
  does `generate` produce? A traced backend compiles one graph per signature; a cache with fixed shapes
  gives one signature for all decoding steps, a growing cache one per step.
- memory: peak cache bytes for the same prompt and generation.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.caches import CacheOptionError
from kvlab.measure.devices import log_forward_inputs
from kvlab.measure.published import GUIDE
from kvlab.recorded_run import run

OFFLOADED_KIND = {"dynamic": "offloaded", "static": "offloaded_static", "quantized": None}
MEMORY_RANKS = ("Low", "Medium", "High")


@dataclass(frozen=True)
class Setup:
    """What each measurement runs. Static caches reserve `static_room` slots beyond what the run needs, as one
    does when the final length is not known in advance; the quantized cache keeps `residual_length` tokens in
    full precision and quantizes the rest."""

    new_tokens: int = 12
    static_room: int = 64
    quantized: tuple = (("backend", "quanto"), ("nbits", 4), ("residual_length", 8), ("q_group_size", 32))

    def options(self, cache_kind: str, prompt_tokens: int) -> dict:
        if cache_kind in ("static", "offloaded_static"):
            return {"max_cache_len": prompt_tokens + self.new_tokens + self.static_room}
        if cache_kind == "quantized":
            return dict(self.quantized)
        return {}


def measure_sliding(model, prompt_ids: torch.Tensor, cache_kind: str, setup: Setup = Setup()) -> dict:
    """Run `cache_kind` on a model with sliding layers past its window; the largest sliding and full layer
    afterwards."""
    window = model.config.sliding_window
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
        return {"supported": False, "evidence": f"refused: {err}"}
    layers = result.trace.layer_table()
    sliding = max(row["slots_allocated"] for row in layers if row["layer_kind"] == "sliding")
    full = max(row["slots_allocated"] for row in layers if row["layer_kind"] == "full")
    tokens = prompt_ids.shape[-1] + setup.new_tokens
    return {
        "supported": sliding <= window,
        "evidence": f"{tokens} tokens: sliding layers hold {sliding} slots (window {window}), full layers {full}",
        "live": _live(result),
    }


def measure_offloading(model, prompt_ids: torch.Tensor, cache_kind: str, setup: Setup = Setup()) -> dict:
    """Run the offloading variant of `cache_kind`, if transformers has one, and count the logged layer transfers."""
    offloaded = OFFLOADED_KIND[cache_kind]
    if offloaded is None:
        takes = "offloading" in inspect.signature(_compat.QuantizedCache.__init__).parameters
        return {
            "supported": takes,
            "evidence": "QuantizedCache "
            + ("takes" if takes else "has no")
            + " offloading argument and no offloaded variant exists",
        }
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
    return {
        "supported": len(transfers) > 0,
        "evidence": f"{offloaded}: {len(transfers)} layer transfers ({moved} between devices; {', '.join(devices)})",
    }


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
        "tokens": result.prompt_tokens + len(result.generated_token_ids) - 1,
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
    `prompt` drive the compile and memory runs.
    """
    rows = []
    for cache_kind in kinds:
        sliding = measure_sliding(sliding_model, sliding_prompt_ids, cache_kind, setup)
        offload = measure_offloading(sliding_model, sliding_prompt_ids[:, :4], cache_kind, setup)
        run_facts = measure_compile_and_memory(full_model, tokenizer, prompt, cache_kind, setup)
        rows.append({"cache_kind": cache_kind, "sliding": sliding, "offloading": offload, **run_facts})
    ranks = _memory_ranks([r["peak_bytes"] for r in rows])
    return [_row(r, rank) for r, rank in zip(rows, ranks)]


def live_runs(rows: list[dict]) -> list[dict]:
    """Every live cache behind a measured table, labelled by model role: for checking a size calculator."""
    out = []
    for row in rows:
        for model_role, live in row["live"].items():
            if live is not None:
                out.append({"cache": row["cache"], "model": model_role, **live})
    return out


def _memory_ranks(peaks: list[int]) -> list[str]:
    order = sorted(range(len(peaks)), key=lambda i: peaks[i])
    names = MEMORY_RANKS if len(peaks) == 3 else tuple(f"#{i + 1}" for i in range(len(peaks)))
    ranks = [""] * len(peaks)
    for place, i in enumerate(order):
        ranks[i] = names[place]
    return ranks


def _row(r: dict, memory_rank: str) -> dict:
    compiles = r["decode_signatures"] == 1
    return {
        "cache": GUIDE[r["cache_kind"]]["cache"],
        "sliding layers": "Yes" if r["sliding"]["supported"] else "No",
        "offloading": "Yes" if r["offloading"]["supported"] else "No",
        "torch.compile": "Yes" if compiles else "No",
        "memory": memory_rank,
        "sliding evidence": r["sliding"]["evidence"],
        "offloading evidence": r["offloading"]["evidence"],
        "compile evidence": (
            f"{r['decode_signatures']} distinct forward signatures over {r['decode_steps']} decoding steps"
        ),
        "peak cache bytes": r["peak_bytes"],
        "live": {"sliding model": r["sliding"].get("live"), "full model": r["live"]},
    }


def compare_with_guide(rows: list[dict]) -> list[dict]:
    """For each measured row: the guide's claim and ours, property by property."""
    by_name = {g["cache"]: g for g in GUIDE.values()}
    out = []
    for row in rows:
        guide = by_name[row["cache"]]
        for prop in ("sliding layers", "offloading", "torch.compile", "memory"):
            out.append(
                {
                    "cache": row["cache"],
                    "property": prop,
                    "guide": guide[prop],
                    "measured": row[prop],
                    "agrees": guide[prop] == row[prop],
                }
            )
    return out


# The guide's three caches, as `generate` keyword arguments: what a learner types. The quantized cache's
# `cache_config` is the table's (quanto, 4 bits, an 8-token full-precision residual).
def calculated_for(trace, arch, prompt_tokens: int, cache_config: dict | None = None):
    """`kvlab.size.cache_size` for the cache a watched `generate` used (`kvlab.watch(...).trace`).

    The cache kind comes from the trace; a static cache's `max_cache_len` is the slots its layers allocated (generate
    sizes it itself); a quantized cache takes the `cache_config` it was built with. Tokens are those the cache
    holds at the end (the last new token is never fed back)."""
    from kvlab.size import cache_size  # kvlab.size is heavier than this module's other imports

    cache_kind = trace.meta["cache"]
    first = trace.final_layers()[0]
    options = {}
    if cache_kind in ("static", "offloaded_static"):
        options = {"max_cache_len": first["slots_allocated"]}
    elif cache_kind == "quantized":
        options = dict(cache_config or {})
    tokens = max(layer["logical_length"] for layer in trace.final_layers())
    return cache_size(
        arch, cache_kind, tokens, prefill=prompt_tokens, dtype=trace.meta.get("dtype", "float32"), **options
    )
