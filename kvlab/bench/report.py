"""The bench's results as a markdown table shaped like the guide's, and as JSON rows."""

from __future__ import annotations

import json
import math

from kvlab.units import human_bytes

COLUMNS = [
    ("configuration", "label"),
    ("sliding layers", "guide_sliding"),
    ("offloading", "guide_offloading"),
    ("torch.compile", "guide_compile"),
    ("expected memory (guide)", "guide_memory"),
    ("peak cache", "peak_cache_bytes"),
    ("bytes/token", "bytes_per_token"),
    ("cache vs dynamic", "ratio_vs_dynamic"),
    ("decode tok/s", "decode_tokens_per_s"),
    ("tok/s vs dynamic", "tokens_per_s_ratio_vs_dynamic"),
    ("decode time vs dynamic (95% interval)", "decode_time_vs_dynamic"),
    ("greedy tokens vs dynamic", "greedy_agreement"),
    ("logit KL vs dynamic", "logit_kl_vs_dynamic"),
    ("perplexity (Δ vs dynamic)", "perplexity"),
    ("roofline fraction", "roofline_fraction"),
]


def _time_ratio(value: dict) -> str:
    quoted = f"{value['ratio']:.2f}× ({value['low']:.2f}–{value['high']:.2f})"
    if value["too_noisy"]:
        return f"{quoted}: too noisy to tell"
    return quoted if value["differs"] else f"{quoted}: no difference beyond noise"


# How a column's value is written when the value alone decides it, by key.
WRITTEN = {
    "peak_cache_bytes": lambda value: f"{human_bytes(value)} ({value:,} B)",
    "device_max_allocated": lambda value: f"{human_bytes(value)} ({value:,} B)",
    "bytes_per_token": "{:,.0f}".format,
    "ratio_vs_dynamic": "{:.2f}×".format,
    "tokens_per_s_ratio_vs_dynamic": "{:.2f}×".format,
    "decode_time_vs_dynamic": _time_ratio,
    "logit_kl_vs_dynamic": "{:.2e}".format,
    "roofline_fraction": lambda value: f"{100 * value:.1f}%",
}


def _fmt(key: str, row: dict) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if key in WRITTEN:
        return WRITTEN[key](value)
    if key == "decode_tokens_per_s":
        spread = row.get("decode_seconds_per_token") or {}
        if spread.get("q1_s") and spread.get("q3_s"):
            return f"{value:.1f} (IQR {1 / spread['q3_s']:.1f}–{1 / spread['q1_s']:.1f})"
        return f"{value:.1f}"
    if key == "greedy_agreement":
        prefix, total = row.get("greedy_identical_prefix"), row.get("_new_tokens")
        same = f"{100 * value:.0f}% of positions"
        if prefix is None or total is None:
            return same
        return f"{prefix}/{total} identical" if prefix == total else f"{prefix}/{total} identical ({same})"
    if key == "perplexity":
        delta = row.get("perplexity_delta_pct")
        return f"{value:.3f} ({delta:+.2f}%)" if delta is not None else f"{value:.3f}"
    return str(value).replace("|", "\\|")


def columns(result: dict) -> list[tuple[str, str]]:
    """The guide-shaped columns, plus device memory when the run had an accelerator."""
    if any(r.get("device_max_allocated") for r in result["rows"]):
        return COLUMNS + [("device max allocated", "device_max_allocated")]
    return COLUMNS


def markdown_table(result: dict) -> str:
    meta = result["meta"]
    COLUMNS = columns(result)  # shadows the module default for this table
    lines = [
        f"**{meta['model']}** ({meta['dtype']}, {meta['device']}), prompt {meta['prompt_tokens']} tokens + "
        f"{meta['new_tokens']} new tokens, {meta['repeats']} interleaved repeats (medians), {meta.get('threads')} "
        f"CPU thread(s), quality on "
        f"{meta['quality_windows']} pydoc text windows; torch {meta['torch']}, transformers {meta['transformers']}.",
        "",
        "| " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    notes = []
    for row in result["rows"]:
        row = {**row, "_new_tokens": meta["new_tokens"]}
        if row["status"] == "unsupported":
            cells = [_fmt(key, row) for _, key in COLUMNS[:5]]
            # transformers' own reason in the table; kvlab's longer explanation stays in the JSON
            reason = row["unsupported"].split(" (kvlab: ")[0].splitlines()[0].replace("|", "\\|")
            lines.append("| " + " | ".join(cells) + f" | unsupported: {reason} |" + " |" * (len(COLUMNS) - 6))
            continue
        if row.get("compile"):
            if row["status"] != "measured":
                lines.append(f"| {row['label']} |" + " |" * 4 + f" {row.get('note', '')} |" + " |" * (len(COLUMNS) - 6))
                continue
            notes.append(
                f"- **{row['label']}**: compile time {row['compile_seconds']:.1f} s; graphs compiled per "
                f"`generate` call {row['recompiles_per_call']} (call 2: same prompt length, call 3: a new "
                f"prompt length); {row.get('tokens_per_s_with_prefill') or float('nan'):.1f} tok/s "
                "including prefill once compiled. " + row.get("note", "")
            )
        lines.append("| " + " | ".join(_fmt(key, row) for _, key in COLUMNS) + " |")
    overhead = result.get("overhead") or {}
    if overhead.get("time_ratio"):
        instrumented, plain = overhead["instrumented_decode_tokens_per_s"], overhead["plain_decode_tokens_per_s"]
        notes.append(
            f"- **instrumentation overhead**: {overhead['time_ratio']:.3f}× the decode time of plain "
            f"transformers DynamicCache ({instrumented:.1f} vs {plain:.1f} tok/s, same run, interleaved, "
            "medians)."
        )
    batching = result.get("batching")
    if batching:
        faster = "faster" if batching["speedup"] >= 1 else "slower"
        notes.append(
            f"- **{batching['label']}**: `generate_batch` {batching['batched_seconds']:.2f} s against "
            f"{batching['sequential_seconds']:.2f} s for one `generate` per request, "
            f"{max(batching['speedup'], 1 / batching['speedup']):.2f}× {faster} (medians of "
            f"{batching['repeats']} interleaved repeats, this machine); same greedy tokens: "
            f"{batching['same_tokens']}."
        )
    if any(r.get("cache") == "quantized" and r.get("status") == "measured" for r in result["rows"]):
        notes.append(
            "- quantized rows use transformers' defaults unless named (q_group_size 64, residual_length 128): "
            "the prompt is quantized at prefill, and decoded tokens wait in the full-precision residual "
            "until it fills, so a short generation keeps them all in full precision."
        )
    roof = result["roofline"]
    notes.append(
        f"- **roofline**: measured copy bandwidth {roof['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s; weights "
        f"{human_bytes(roof['weight_bytes'])}; roofline fraction = decode tok/s ÷ (bandwidth ÷ "
        "(weights + mean cache bytes per decode step)); the bandwidth of a shared CPU moves with its load."
    )
    notes.append(
        "- peak cache = the most bytes the cache held (kvlab trace, distinct storages); bytes/token = peak ÷ "
        f"{meta['tokens_in_cache']} tokens held; KL and perplexity: teacher-forced through each cache, "
        "vs the instrumented dynamic cache."
    )
    return "\n".join(lines + [""] + notes) + "\n"


def to_json(result: dict) -> str:
    """The result as strict JSON (NaN as null), what `kvlab bench --json` prints and `--from-json` reads back."""
    return json.dumps(_strict(result), indent=1, default=_jsonable, allow_nan=False)


def _jsonable(value):
    return None if isinstance(value, float) else str(value)


def _strict(value):
    """NaN becomes null so the JSON is strict."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(x) for k, x in value.items()}
    if isinstance(value, list):
        return [_strict(x) for x in value]
    return value
