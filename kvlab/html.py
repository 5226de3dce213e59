"""Rich HTML summaries: what a notebook shows for a `Trace` or a `RunResult` left as a cell's last expression.

A compact table (steps, peak and final bytes, slots allocated/live/masked, waste %, evictions, crops, flushes,
transfers) and, for a `RunResult`, the model, cache, options and generated text; the per-layer table folds away
in a `<details>`. Colours come from JupyterLab's theme variables (with light fallbacks for a plain HTML page),
so the summary stays readable in the dark theme. Every number cell carries its raw value in `data-value`.
"""

from __future__ import annotations

import html

from kvlab.units import human_bytes

# JupyterLab's theme variables; the fallbacks are what a page without them (nbviewer, a browser) shows.
BORDER = "var(--jp-border-color2, #ddd)"
MUTED = "var(--jp-ui-font-color2, #666)"
CELL = f"padding:1px 8px;border-bottom:1px solid {BORDER};text-align:right"
HEAD = f"padding:1px 8px;border-bottom:1px solid {BORDER};text-align:left;font-weight:normal;color:{MUTED}"

SUMMARY_ROWS = (
    ("steps", "steps (0 = prefill)"),
    ("peak_bytes", "peak bytes"),
    ("final_bytes", "final bytes"),
    ("slots_allocated", "slots allocated"),
    ("slots_live", "slots live"),
    ("slots_masked", "slots masked"),
    ("waste_pct", "waste %"),
    ("tokens_evicted", "tokens evicted"),
    ("crops", "crops"),
    ("flushes", "flushes"),
    ("transfers", "transfers"),
)
LAYER_COLUMNS = (
    "layer_idx",
    "role",
    "layer_kind",
    "logical_length",
    "slots_allocated",
    "slots_live",
    "slots_masked",
    "bytes_held",
    "tokens_evicted",
    "device",
)


def _number(field: str, value) -> str:
    if value is None:
        return f'<td data-field="{field}" style="{CELL}"></td>'
    if field.endswith("bytes"):
        shown = human_bytes(value, decimals=1)
    elif isinstance(value, float):
        shown = f"{value:g}"
    else:
        shown = f"{value:,}"
    return f'<td data-field="{field}" data-value="{value}" style="{CELL}">{html.escape(shown)}</td>'


def summary_table(summary: dict) -> str:
    """The summary numbers as a two-column table (name, value)."""
    rows = "".join(
        f'<tr><th style="{HEAD}">{html.escape(title)}</th>{_number(field, summary.get(field))}</tr>'
        for field, title in SUMMARY_ROWS
    )
    if summary.get("transfers"):
        rows += (
            f'<tr><th style="{HEAD}">bytes transferred</th>'
            f"{_number('transfer_bytes', summary.get('transfer_bytes'))}</tr>"
        )
    return f'<table class="kvlab-html-summary" style="border-collapse:collapse;font-size:12px">{rows}</table>'


def layer_table(rows: list[dict]) -> str:
    """One row per layer (`Trace.layer_table()`), folded in a <details> so the summary stays compact."""
    if not rows:
        return ""
    head = "".join(f'<th style="{HEAD}">{html.escape(c)}</th>' for c in LAYER_COLUMNS)
    body = "".join(
        "<tr>"
        + "".join(
            _number(c, r.get(c))
            if isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
            else f'<td data-field="{c}" style="{CELL}">{html.escape(str(r.get(c, "")))}</td>'
            for c in LAYER_COLUMNS
        )
        + "</tr>"
        for r in rows
    )
    return (
        f'<details class="kvlab-html-layers"><summary style="cursor:pointer;font-size:12px;color:{MUTED}">'
        f"{len(rows)} layers</summary>"
        f'<table style="border-collapse:collapse;font-size:11px">{head and f"<tr>{head}</tr>"}{body}</table>'
        "</details>"
    )


def _options(options) -> str:
    if not options:
        return "default options"
    if isinstance(options, dict):
        return ", ".join(f"{k}={v}" for k, v in options.items())
    return str(options)


def _title(text: str) -> str:
    return f'<div style="font-size:13px;margin-bottom:2px"><b>{text}</b></div>'


def trace_html(trace) -> str:
    """A `Trace` as HTML: what produced it (from `meta`), its summary, and the per-layer table folded away."""
    summary = trace.summary()
    meta = trace.meta
    what = []
    if meta.get("model"):
        what.append(html.escape(str(meta["model"])))
    if meta.get("cache"):
        options = html.escape(_options(meta.get("options")))
        what.append(f"cache <code>{html.escape(str(meta['cache']))}</code> ({options})")
    if meta.get("dtype"):
        what.append(html.escape(str(meta["dtype"])))
    counts = f"{len(trace.events):,} events"
    if "prompt_tokens" in meta and "new_tokens" in meta:
        counts += f", prompt {meta['prompt_tokens']} tokens, {meta['new_tokens']} new"
    if isinstance(meta.get("tokens_per_s"), (int, float)):
        counts += f", {meta['tokens_per_s']:.1f} tokens/s"
    header = _title("kvlab Trace" + (": " + " · ".join(what) if what else ""))
    return (
        f'<div class="kvlab-html kvlab-html-trace">{header}'
        f'<div style="font-size:12px;color:{MUTED}">{counts}</div>'
        f"{summary_table(summary)}{layer_table(trace.layer_table())}</div>"
    )


def run_result_html(result) -> str:
    """A `RunResult` as HTML: model, cache, options, tokens and time, the generated text, and its trace's summary."""
    options = html.escape(_options(result.options))
    header = _title(
        f"kvlab run: {html.escape(str(result.model))} · cache <code>{html.escape(str(result.cache))}"
        f"</code> ({options}) · {html.escape(str(result.dtype))}"
    )
    new = len(result.generated_token_ids)
    timing = (
        f"prompt {result.prompt_tokens} tokens → {new} new tokens in {result.seconds:.2f} s "
        f"({result.tokens_per_s:.1f} tokens/s)"
    )
    text = (
        f'<pre class="kvlab-html-text" style="white-space:pre-wrap;margin:4px 0;padding:4px;max-height:8em;'
        f'overflow:auto;border:1px solid {BORDER}">{html.escape(result.text)}</pre>'
    )
    trace = result.trace
    return (
        f'<div class="kvlab-html kvlab-html-run">{header}<div style="font-size:12px;color:{MUTED}">{timing}</div>'
        f"{text}{summary_table(trace.summary())}{layer_table(trace.layer_table())}</div>"
    )
