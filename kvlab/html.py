"""Rich HTML summaries: what a notebook shows for a `Trace`, a `RunResult`, a trace's `summary()` or its
`layer_table()` left as a cell's last expression.

A compact table (steps, peak and final bytes, slots allocated/live/masked, waste %, evictions, crops, flushes,
transfers) and, for a `RunResult`, the model, cache, options and generated text; the per-layer table folds away
in a `<details>`. Colours come from JupyterLab's theme variables (with light fallbacks for a plain HTML page),
so the summary stays readable in the dark theme. Every number cell carries its raw value in `data-value`.

The objects do not know this module: recording sits above presentation (ARCHITECTURE.md), so a `Trace` has no
`_repr_html_`. Importing this module registers the HTML with IPython's display formatter, by the classes'
module and name, when IPython is running (a notebook, `ipython`); `register_ipython(shell)` does it for a given
shell. A plain script never imports IPython for it, and prints the objects' text tables.
"""

from __future__ import annotations

import html
import sys

from kvlab.i18n import N_, _, number

# JupyterLab's theme variables; the fallbacks are what a page without them (nbviewer, a browser) shows.
BORDER = "var(--jp-border-color2, #ddd)"
MUTED = "var(--jp-ui-font-color2, #666)"
CELL = f"padding:1px 8px;border-bottom:1px solid {BORDER};text-align:right"
HEAD = f"padding:1px 8px;border-bottom:1px solid {BORDER};text-align:left;font-weight:normal;color:{MUTED}"

# (field, row title): the titles are English here and shown in the language in use (`_()` in `summary_table`).
SUMMARY_ROWS = (
    ("steps", N_("steps (0 = prefill)")),
    ("peak_bytes", N_("peak bytes")),
    ("final_bytes", N_("final bytes")),
    ("slots_allocated", N_("slots allocated")),
    ("slots_live", N_("slots live")),
    ("slots_masked", N_("slots masked")),
    ("waste_pct", N_("waste %")),
    ("tokens_evicted", N_("tokens evicted")),
    ("crops", N_("crops")),
    ("flushes", N_("flushes")),
    ("transfers", N_("transfers")),
)


def _number(field: str, value) -> str:
    from kvlab.recording.trace import shown  # here, not above: importing kvlab.html stays free of torch

    if value is None:
        return f'<td data-field="{field}" style="{CELL}"></td>'
    return f'<td data-field="{field}" data-value="{value}" style="{CELL}">{html.escape(shown(field, value))}</td>'


def summary_table(summary: dict) -> str:
    """The summary numbers as a two-column table (name, value)."""
    rows = "".join(
        f'<tr><th style="{HEAD}">{html.escape(_(title))}</th>{_number(field, summary.get(field))}</tr>'
        for field, title in SUMMARY_ROWS
    )
    if summary.get("transfers"):
        title = html.escape(_("bytes transferred"))
        rows += f'<tr><th style="{HEAD}">{title}</th>{_number("transfer_bytes", summary.get("transfer_bytes"))}</tr>'
    return f'<table class="kvlab-html-summary" style="border-collapse:collapse;font-size:12px">{rows}</table>'


def layer_rows(rows: list[dict]) -> str:
    """One row per layer (`Trace.layer_table()`), under a header of the fields, the columns `LayerTable` shows."""
    from kvlab.recording.trace import LayerTable  # loaded already: a trace exists to be shown

    columns = LayerTable(rows).columns()
    head = "".join(f'<th style="{HEAD}">{html.escape(c)}</th>' for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            _number(c, r.get(c))
            if isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
            else f'<td data-field="{c}" style="{CELL}">{html.escape(str(r.get(c, "")))}</td>'
            for c in columns
        )
        + "</tr>"
        for r in rows
    )
    table = '<table class="kvlab-html-layer-table" style="border-collapse:collapse;font-size:11px">'
    return f"{table}<tr>{head}</tr>{body}</table>"


def layer_table(rows: list[dict]) -> str:
    """The per-layer table folded in a <details>, so a trace's summary stays compact ("" without layers)."""
    if not rows:
        return ""
    count = html.escape(_("{count} layers").format(count=len(rows)))
    return (
        f'<details class="kvlab-html-layers"><summary style="cursor:pointer;font-size:12px;color:{MUTED}">'
        f"{count}</summary>{layer_rows(rows)}</details>"
    )


def _options(options) -> str:
    if not options:
        return _("default options")
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
    if meta.get("cache_kind"):
        options = html.escape(_options(meta.get("options")))
        code = f"<code>{html.escape(str(meta['cache_kind']))}</code>"
        what.append(_("cache {cache} ({options})").format(cache=code, options=options))
    if meta.get("dtype"):
        what.append(html.escape(str(meta["dtype"])))
    counts = [_("{events} events").format(events=number(len(trace.events)))]
    if "prompt_tokens" in meta and "new_tokens" in meta:
        counts.append(
            _("prompt {prompt_tokens} tokens, {new_tokens} new").format(
                prompt_tokens=meta["prompt_tokens"], new_tokens=meta["new_tokens"]
            )
        )
    if isinstance(meta.get("tokens_per_s"), (int, float)):
        counts.append(_("{rate} tokens/s").format(rate=number(meta["tokens_per_s"], 1, grouping=False)))
    header = _title("kvlab Trace" + (": " + " · ".join(what) if what else ""))
    return (
        f'<div class="kvlab-html kvlab-html-trace">{header}'
        f'<div style="font-size:12px;color:{MUTED}">{", ".join(counts)}</div>'
        f"{summary_table(summary)}{layer_table(trace.layer_table())}</div>"
    )


def run_result_html(result) -> str:
    """A `RunResult` as HTML: model, cache, options, tokens and time, the generated text, and its trace's summary."""
    options = html.escape(_options(result.options))
    cache = _("cache {cache} ({options})").format(
        cache=f"<code>{html.escape(str(result.cache))}</code>", options=options
    )
    header = _title(f"kvlab run: {html.escape(str(result.model))} · {cache} · {html.escape(str(result.dtype))}")
    timing = _("prompt {prompt_tokens} tokens → {new_tokens} new tokens in {seconds} s ({rate} tokens/s)").format(
        prompt_tokens=result.prompt_tokens,
        new_tokens=len(result.generated_token_ids),
        seconds=number(result.seconds, 2, grouping=False),
        rate=number(result.tokens_per_s, 1, grouping=False),
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


def _shown_layers(rows: list[dict]) -> str | None:
    """A layer table shown on its own: unfolded; None (the text table) when it is empty."""
    return layer_rows(rows) if rows else None


# (module, class name, HTML of one object): by name, so registering imports neither torch nor the classes
DISPLAYS = (
    ("kvlab.recording.trace", "Trace", trace_html),
    ("kvlab.recording.trace", "TraceSummary", summary_table),
    ("kvlab.recording.trace", "LayerTable", _shown_layers),
    ("kvlab.recorded_run", "RunResult", run_result_html),
)


def register_ipython(shell=None) -> bool:
    """Have `shell` (default: the running IPython, if any) show kvlab's objects as the HTML above. Returns whether
    there was a shell to register with; registering twice changes nothing."""
    if shell is None:
        if "IPython" not in sys.modules:  # no IPython imported, none running: nothing to register with
            return False
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            return False
    formatter = shell.display_formatter.formatters["text/html"]
    for module, name, render in DISPLAYS:
        formatter.for_type_by_name(module, name, render)
    return True


register_ipython()  # importing kvlab.html in a notebook is what turns the HTML on
