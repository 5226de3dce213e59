"""What leaves the explorer (the trace as JSON, the figure as PNG, the table as CSV) and a saved trace loaded back.

The kernel may not share a disk with the browser (Voila, a remote JupyterLab), so a file is offered as an
`<a download>` link whose `data:` URI holds the bytes: no server route, the same in JupyterLab and Voila.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvlab.atomic import write_bytes
from kvlab.explorer.run_values import Run, RunRequest
from kvlab.explorer.summary import columns_for
from kvlab.i18n import N_, _
from kvlab.units import human_bytes

if TYPE_CHECKING:
    from kvlab.recording.trace import Trace

LINK = "var(--jp-content-link-color, #0d47a1)"  # JupyterLab's link colour, light or dark theme
MIME = {"json": "application/json", "png": "image/png", "csv": "text/csv"}


@dataclass
class Export:
    """A file ready to leave the explorer."""

    name: str
    data: bytes
    mime: str

    def link(self) -> str:
        """An HTML link that makes the browser save `data` as `name`."""
        encoded = base64.b64encode(self.data).decode("ascii")
        name = html.escape(self.name)
        return (
            f'<a class="kvlab-download" download="{name}" data-mime="{self.mime}" '
            f'href="data:{self.mime};base64,{encoded}" style="margin-right:4px;color:{LINK}">⬇ {name}</a>'
            f'<span style="opacity:0.7;margin-right:16px;white-space:nowrap">({size_text(len(self.data))})'
            "</span>"
        )

    def write(self, directory: str | Path) -> Path:
        """Write the file into `directory` atomically: a failed write leaves an earlier save of the same name."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        return write_bytes(directory / self.name, self.data)


def size_text(n: int) -> str:
    return human_bytes(n, decimals=1, localized=True)


def slug(text: str) -> str:
    """A file-name-safe form of a label: `smollm2 · static (max_cache_len=64)` -> `smollm2_static_max_cache_len64`."""
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.-]+", "_", text.replace("=", ""))).strip("_.") or "run"


def for_run(run: Run, what: str, extension: str, data: bytes) -> Export:
    """`data` in a file named after the run: `kvlab_table_smollm2_static.csv`."""
    name = slug(f"{run.request.model}_{run.request.cache}")
    return Export(f"kvlab_{what}_{name}.{extension}", data, MIME[extension])


def trace_json(run: Run) -> bytes:
    """The bytes `Trace.save` writes, so `Trace.load` (and Load trace) reads them back: the run's trace with what the
    explorer knows besides it (label, prompt, text, token ids) in `meta`."""
    trace = run.snapshot()
    meta = trace.meta
    meta.setdefault("label", run.label)
    meta.setdefault("prompt_tokens", run.prompt_tokens)
    if run.result is not None:
        meta.setdefault("text", run.result.text)
        meta.setdefault("generated_token_ids", list(run.result.generated_token_ids))
    return json.dumps(trace.to_dict(), indent=1, default=str).encode("utf-8")


def table_csv(rows: list[dict]) -> bytes:
    """The summary table as CSV: the table's columns, then the full run label."""
    fields = [f for f, _ in columns_for(rows)] + ["label", "stopped"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({f: "" if row.get(f) is None else row.get(f) for f in fields})
    return out.getvalue().encode("utf-8")


def links_html(exports: list[Export]) -> str:
    if not exports:
        return ""
    links = "".join(e.link() for e in exports)
    ready = html.escape(_("ready to save (click to download):"))
    return f'<div class="kvlab-downloads-list" style="font-size:12px">{ready} {links}</div>'


# `Trace.load`'s refusals, naming every way a file to load into the explorer is made.
NOT_TEXT = N_(
    "{path} is not text (not UTF-8); a kvlab trace is the JSON written by Trace.save(), `kvlab run --trace` or the "
    "explorer's Save trace."
)
NOT_JSON = N_(
    "{path} does not parse as JSON ({error} at line {line}); a kvlab trace is the JSON written by Trace.save(), "
    "`kvlab run --trace` or the explorer's Save trace."
)


def read_trace(name: str, content: bytes) -> Trace:
    """A trace from an uploaded file's bytes, refused (TraceFormatError, one line) as `Trace.load` refuses a file."""
    from kvlab.recording.trace import parse_trace  # torch: the app loads a trace once its warm-up has imported it

    return parse_trace(content, name, NOT_TEXT, NOT_JSON)


def loaded_run(trace: Trace, name: str) -> Run:
    """A finished `Run` made from a saved trace, with no model or cache object behind it (a crop is refused)."""
    from kvlab.recorded_run import RunResult  # torch: the app loads a trace once its warm-up has imported it

    meta = trace.meta
    options, ids, seconds = meta.get("options"), meta.get("generated_token_ids"), meta.get("seconds")
    request = RunRequest(
        model=str(meta.get("model", "?")),
        dtype=str(meta.get("dtype", "float32")),
        cache=str(meta.get("cache_kind", "?")),
        options=dict(options) if isinstance(options, dict) else {},
        past_recording=bool(meta.get("past_recording", False)),
        max_new_tokens=_int(meta.get("new_tokens")),
    )
    ids = [int(i) for i in ids] if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else []
    prompt_tokens, text = _int(meta.get("prompt_tokens")), str(meta.get("text", ""))
    seconds = float(seconds) if isinstance(seconds, (int, float)) else 0.0
    result = RunResult(
        request.model, request.cache, request.options, request.dtype, prompt_tokens, ids, text, seconds, trace
    )
    run = Run(request, trace, ids, result, prompt_tokens=prompt_tokens, done=True, loaded_from=name)
    run.new_tokens_loaded = _int(meta.get("new_tokens"), len(ids))
    return run


def _int(value, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
