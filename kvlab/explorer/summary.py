"""The summary table: one row per run (the comparison runs, then the current one), as HTML for an ipywidget.

Slot and byte columns describe what the cache holds *now* (after any crop); every number cell carries its raw value
in `data-value`, readable without parsing thousands separators. A kind may add columns (`ExplorerKind.row_fields`).
"""

from __future__ import annotations

import html

from kvlab.explorer import kinds
from kvlab.html import BORDER, SUMMARY_WORDS
from kvlab.i18n import _, marks, number
from kvlab.measure.timing import Timing
from kvlab.recording.slots import waste_pct

# (field, column title), the title shown through `_()`: the words come from `kvlab.html.SUMMARY_WORDS`, the one table
# of them, beside the rows of a trace's summary table.
COLUMNS = tuple(
    (field, SUMMARY_WORDS[field].column)
    for field in (
        "run prompt_tokens new_tokens steps peak_bytes bytes_now slots_allocated slots_live slots_masked waste_pct "
        "tokens_evicted flushes transfers crops ms_per_step tokens_per_s"
    ).split()
)


def _extra_kinds(rows: list[dict]) -> list[kinds.ExplorerKind]:
    """The kinds whose own fields some row carries, in the cache menu's order."""
    named = {r.get("fields_of") for r in rows}
    return [kind for kind in kinds.KINDS if kind.name in named]


def columns_for(rows: list[dict]) -> tuple[tuple[str, str], ...]:
    """The table's columns: a kind's own (the paged ones) only when a row carries its fields."""
    return COLUMNS + tuple(column for kind in _extra_kinds(rows) for column in kind.columns)


def run_row(name: str, run) -> dict:
    trace = run.snapshot()
    summary = trace.summary()
    rows = run.layer_rows()
    allocated = sum(r["slots_allocated"] for r in rows)
    masked = sum(r["slots_masked"] for r in rows)
    meta = trace.meta
    decode = trace.step_seconds()[1:]  # the decode steps' median ms and IQR, "95.1 (93.8–97.0)": not the prefill
    row = {
        "run": name,
        "label": run.label,
        "prompt_tokens": run.prompt_tokens,
        "new_tokens": run.new_tokens,
        "steps": summary["steps"],
        "peak_bytes": summary["peak_bytes"],
        "bytes_now": sum(r["bytes_held"] for r in rows),
        "slots_allocated": allocated,
        "slots_live": sum(r["slots_live"] for r in rows),
        "slots_masked": masked,
        "waste_pct": waste_pct(masked, allocated),
        **{key: summary[key] for key in ("tokens_evicted", "flushes", "transfers", "crops")},
        "ms_per_step": _spread(decode, 1e3) if decode else None,
        "tokens_per_s": round(meta["tokens_per_s"], 1) if "tokens_per_s" in meta else None,
        "stopped": bool(meta.get("stopped")),
        "crop_note": crop_note(run.crop_bytes) if run.crop_bytes else None,
    }
    kind = kinds.for_trace(trace)
    if kind.row_fields is not None and trace.updates:
        row.update(kind.row_fields(trace), fields_of=kind.name)
    return row


def crop_note(crop: dict) -> str:
    """What the last crop did to the bytes the cache holds (`Run.crop_bytes`): a DynamicCache's crop leaves views
    that keep their storage, a static cache only moves its write position back."""
    n, before, after, kept = crop["n"], crop["before"], crop["after"], crop["kept_by_views"]
    if after != before:
        return _("crop(-{n}) took bytes now from {before} B to {after} B.").format(
            n=n, before=number(before), after=number(after)
        )
    if kept:
        return _(
            "bytes now is unchanged by crop(-{n}): the cropped keys and values are views that keep their old storage "
            "({kept} B of it hold no token now), freed when the next forward's torch.cat copies them into new tensors."
        ).format(n=n, kept=number(kept))
    return _(
        "bytes now is unchanged by crop(-{n}): the cache keeps its preallocated tensors and only moves its write "
        "position back; the next tokens overwrite the cropped slots."
    ).format(n=n)


def _spread(values: list[float], scale: float = 1, repeats: str = "") -> str:
    """The median and interquartile range of `values` times `scale`: "95.1 (93.8–97.0)"."""
    timing = Timing("", values)
    q1, q3 = timing.quartiles
    return marks(f"{timing.median * scale:,.1f} ({q1 * scale:,.1f}–{q3 * scale:,.1f}{repeats})")


def _repeated_speed(rows: list[dict]) -> None:
    """Runs of the same configuration and prompt, repeated: their tokens/s as a median with its spread."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row["tokens_per_s"] is not None and not row["stopped"]:
            groups.setdefault((row["label"], row["prompt_tokens"], row["new_tokens"]), []).append(row)
    for group in groups.values():
        if len(group) > 1:
            shown = _spread([r["tokens_per_s"] for r in group], repeats=f", {len(group)}×")
            for row in group:
                row["tokens_per_s"] = shown


def rows_for(session) -> list[dict]:
    rows = [run_row(f"[{n + 1}]", run) for n, run in enumerate(session.comparison)]
    current = session.current
    if current is not None and not any(r is current for r in session.comparison):
        rows.append(run_row("now", current))
    _repeated_speed(rows)
    return rows


# JupyterLab's theme variable, with a fallback for Voila's page: the border of kvlab's HTML tables.
CELL = f"padding:2px 5px;border-bottom:1px solid {BORDER}"
VALUE = CELL + ";white-space:nowrap"  # a value never wraps; a column title may (`to_html`)


def _cell(field: str, value) -> str:
    if isinstance(value, bool) or value is None:
        return f'<td data-field="{field}">{"" if value is None else value}</td>'
    if isinstance(value, (int, float)) and field != "run":
        shown = marks(f"{value:,}" if isinstance(value, int) else f"{value:g}")
        return f'<td data-field="{field}" data-value="{value}" style="{VALUE};text-align:right">{shown}</td>'
    shown = _run_name(value) if field == "run" else str(value)
    return f'<td data-field="{field}" style="{VALUE}">{html.escape(shown)}</td>'


def _run_name(name: str) -> str:
    """ "[1]" stays; "now" (a key in `data-run`) is shown in the language in use."""
    return _("now") if name == "now" else name


def to_html(rows: list[dict]) -> str:
    if not rows:
        return "<i>" + html.escape(_("No runs yet: choose a cache and press Run.")) + "</i>"
    columns = columns_for(rows)
    # Titles wrap at their spaces, numbers never: the table fits a 1280-px window in either language, and its box
    # scrolls sideways where a narrower one cannot hold it.
    head = "".join(f'<th style="{CELL};vertical-align:bottom">{html.escape(_(title))}</th>' for _f, title in columns)
    body, labels = [], []
    for row in rows:
        stopped = " " + _("(stopped)") if row["stopped"] else ""
        cells = "".join(_cell(f, row.get(f)) for f, _title in columns)
        title = html.escape(row["label"] + stopped)
        body.append(f'<tr class="kvlab-row" data-run="{row["run"]}" title="{title}">{cells}</tr>')
        note = f'<br><i class="kvlab-crop-note">{html.escape(row["crop_note"])}</i>' if row.get("crop_note") else ""
        labels.append(f"<li><b>{html.escape(_run_name(row['run']))}</b> {title}{note}</li>")
    labels += [f"<li><i>{html.escape(_(kind.note))}</i></li>" for kind in _extra_kinds(rows) if kind.note]
    return (
        '<div class="kvlab-summary-scroll" style="overflow-x:auto;max-width:100%">'
        f'<table class="kvlab-summary-table" style="border-collapse:collapse;font-size:11px">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        f'<ul style="font-size:12px;margin:4px 0">{"".join(labels)}</ul>'
    )
