"""What a notebook shows for a `Trace`, a `RunResult`, a `summary()` or a `layer_table()`: compact HTML in
JupyterLab's theme colours, every number cell with its raw value in `data-value`. Recording sits above
presentation, so a `Trace` has no `_repr_html_`: importing this module registers the HTML with a running IPython.
"""

from __future__ import annotations

import html
import sys
from typing import NamedTuple

from kvlab.i18n import N_, _, number

# JupyterLab's theme variables; the fallbacks are what a page without them (nbviewer, a browser) shows.
BORDER = "var(--jp-border-color2, #ddd)"
MUTED = "var(--jp-ui-font-color2, #666)"
CELL = f"padding:1px 8px;border-bottom:1px solid {BORDER};text-align:right"
HEAD = f"padding:1px 8px;border-bottom:1px solid {BORDER};text-align:left;font-weight:normal;color:{MUTED}"


class Words(NamedTuple):
    """What a summary field is called, shown through `_()`: its `label` where there is room (a row of a trace's
    summary table), its `column` title over the explorer's table, which puts every field across one window."""

    label: str
    short: str = ""  # the column title where the label is too wide for a column; "" where it fits

    @property
    def column(self) -> str:
        return self.short or self.label


# The words for the fields of a run's summary: the one table a trace's summary table (below) and the explorer's
# table (`kvlab.explorer.summary`) both read, each showing the fields it lists, in its own order.
SUMMARY_WORDS = {
    "run": Words(N_("run")),
    "prompt_tokens": Words(N_("prompt")),
    "new_tokens": Words(N_("new")),
    "steps": Words(N_("steps (0 = prefill)"), N_("steps")),
    "peak_bytes": Words(N_("peak bytes")),
    "final_bytes": Words(N_("final bytes")),
    "bytes_now": Words(N_("bytes now")),
    "slots_allocated": Words(N_("slots allocated"), N_("allocated")),
    "slots_live": Words(N_("slots live"), N_("live")),
    "slots_masked": Words(N_("slots masked"), N_("masked")),
    "waste_pct": Words(N_("waste %")),
    "tokens_evicted": Words(N_("tokens evicted"), N_("evicted")),
    "crops": Words(N_("crops")),
    "flushes": Words(N_("flushes")),
    "transfers": Words(N_("transfers")),
    "transfer_bytes": Words(N_("bytes transferred")),
    "ms_per_step": Words(N_("ms/step (IQR)")),
    "tokens_per_s": Words(N_("tokens/s")),
}

# The rows of a trace's summary table, by field; "transfer_bytes" only where the cache transferred.
SUMMARY_ROWS = (
    "steps",
    "peak_bytes",
    "final_bytes",
    "slots_allocated",
    "slots_live",
    "slots_masked",
    "waste_pct",
    "tokens_evicted",
    "crops",
    "flushes",
    "transfers",
)


def _cell(field: str, value) -> str:
    """A number as the text tables show it, its raw value in `data-value`; anything else as text, None empty."""
    from kvlab.recording.trace import shown  # here, not above: importing kvlab.html stays free of torch

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td data-field="{field}" data-value="{value}" style="{CELL}">{html.escape(shown(field, value))}</td>'
    return f'<td data-field="{field}" style="{CELL}">{html.escape("" if value is None else str(value))}</td>'


def summary_table(summary: dict) -> str:
    """The summary numbers as a two-column table (name, value)."""
    fields = SUMMARY_ROWS + (("transfer_bytes",) if summary.get("transfers") else ())
    rows = "".join(
        f'<tr><th style="{HEAD}">{html.escape(_(SUMMARY_WORDS[field].label))}</th>'
        f"{_cell(field, summary.get(field))}</tr>"
        for field in fields
    )
    return f'<table class="kvlab-html-summary" style="border-collapse:collapse;font-size:12px">{rows}</table>'


def layer_rows(rows: list[dict]) -> str:
    """One row per layer (`Trace.layer_table()`), in the columns `LayerTable` shows."""
    from kvlab.recording.trace import LayerTable  # loaded already: a trace exists to be shown

    columns = LayerTable(rows).columns()
    head = "".join(f'<th style="{HEAD}">{html.escape(c)}</th>' for c in columns)
    body = "".join("<tr>" + "".join(_cell(c, r.get(c, "")) for c in columns) + "</tr>" for r in rows)
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


def _cache(kind, options) -> str:
    if not options:
        options = _("default options")
    elif isinstance(options, dict):
        options = ", ".join(f"{k}={v}" for k, v in options.items())
    code = f"<code>{html.escape(str(kind))}</code>"
    return _("cache {cache} ({options})").format(cache=code, options=html.escape(str(options)))


def _page(kind: str, header: str, line: str, trace, text: str = "") -> str:
    return (
        f'<div class="kvlab-html kvlab-html-{kind}"><div style="font-size:13px;margin-bottom:2px"><b>{header}</b></div>'
        f'<div style="font-size:12px;color:{MUTED}">{line}</div>'
        f"{text}{summary_table(trace.summary())}{layer_table(trace.layer_table())}</div>"
    )


def trace_html(trace) -> str:
    """A `Trace` as HTML: what produced it (from `meta`), its summary, and the per-layer table folded away."""
    meta = trace.meta
    what = [html.escape(str(meta["model"]))] if meta.get("model") else []
    if meta.get("cache_kind"):
        what.append(_cache(meta["cache_kind"], meta.get("options")))
    if meta.get("dtype"):
        what.append(html.escape(str(meta["dtype"])))
    counts = [_("{events} events").format(events=number(len(trace.events)))]
    if "prompt_tokens" in meta and "new_tokens" in meta:
        tokens = _("prompt {prompt_tokens} tokens, {new_tokens} new")
        counts.append(tokens.format(prompt_tokens=meta["prompt_tokens"], new_tokens=meta["new_tokens"]))
    if isinstance(meta.get("tokens_per_s"), (int, float)):
        counts.append(_("{rate} tokens/s").format(rate=number(meta["tokens_per_s"], 1, grouping=False)))
    return _page("trace", "kvlab Trace" + (": " + " · ".join(what) if what else ""), ", ".join(counts), trace)


def run_result_html(result) -> str:
    """A `RunResult` as HTML: model, cache, options, tokens and time, the generated text, and its trace's summary."""
    cache = _cache(result.cache, result.options)
    header = f"kvlab run: {html.escape(str(result.model))} · {cache} · {html.escape(str(result.dtype))}"
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
    return _page("run", header, timing, result.trace, text)


def _shown_layers(rows: list[dict]) -> str | None:
    """A layer table shown on its own: unfolded; None (the text table) when empty."""
    return layer_rows(rows) if rows else None


# (module, class name, HTML of one object): by name, so that registering imports neither torch nor the classes
DISPLAYS = (
    ("kvlab.recording.trace", "Trace", trace_html),
    ("kvlab.recording.trace", "TraceSummary", summary_table),
    ("kvlab.recording.trace", "LayerTable", _shown_layers),
    ("kvlab.recorded_run", "RunResult", run_result_html),
)


def register_ipython(shell=None) -> bool:
    """Have `shell` (default: the running IPython, if any) show kvlab's objects as HTML; whether there was one.
    A plain script never imports IPython for it."""
    if shell is None and "IPython" in sys.modules:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None:
        return False
    formatter = shell.display_formatter.formatters["text/html"]
    for module, name, render in DISPLAYS:
        formatter.for_type_by_name(module, name, render)
    return True


register_ipython()  # importing kvlab.html in a notebook is what turns the HTML on
