"""What leaves the explorer, and what comes back: the trace (JSON), the figure (PNG), the table (CSV), and a
saved trace loaded in again.

The explorer is served by a kernel the browser may not share a disk with (Voila, a remote JupyterLab), so a
saved file is offered as a download: an `<a download>` link whose `data:` URI holds the bytes, which the
browser saves where the user keeps downloads. It works the same in JupyterLab and Voila and needs no server
route. With `Explorer(save_dir=...)` the file is also written there and the message prints its path.
Loading goes the other way through an `ipywidgets.FileUpload`: the bytes are checked as `Trace.load` checks a
file, and a file that is not a trace is refused in one line.

Everything here is a plain function of bytes and values, tested without a browser.
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
    """A file ready to leave the explorer: its name, bytes and MIME type (and where it was written, if it was)."""

    name: str
    data: bytes
    mime: str
    path: Path | None = None

    def link(self) -> str:
        """An HTML link that makes the browser save `data` as `name` (a data: URI, so no server is involved)."""
        encoded = base64.b64encode(self.data).decode("ascii")
        name = html.escape(self.name)
        return (
            f'<a class="kvlab-download" download="{name}" data-mime="{self.mime}" '
            f'href="data:{self.mime};base64,{encoded}" style="margin-right:4px;color:{LINK}">⬇ {name}</a>'
            f'<span style="opacity:0.7;margin-right:16px;white-space:nowrap">({size_text(len(self.data))})'
            "</span>"
        )

    def write(self, directory: str | Path) -> Path:
        """Write the file into `directory` atomically: a failed write (a full disk) leaves an earlier save of the
        same name as it was and raises AtomicWriteError naming the file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = write_bytes(directory / self.name, self.data)
        self.path = path
        return path


def size_text(n: int) -> str:
    """A download's size, as the HTML summary shows bytes."""
    return human_bytes(n, decimals=1, localized=True)


def slug(text: str) -> str:
    """A file-name-safe form of a label: `smollm2 · static (max_cache_len=64)` -> `smollm2_static_max_cache_len64`."""
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.-]+", "_", text.replace("=", ""))).strip("_.") or "run"


def run_name(run: Run) -> str:
    return slug(f"{run.request.model}_{run.request.cache}")


# -- saving ------------------------------------------------------------------------------------------------------
def saved_trace(run: Run) -> Trace:
    """The run's trace with what the explorer knows besides it (label, prompt, text, token ids) in `meta`."""
    trace = run.snapshot()
    meta = trace.meta
    meta.setdefault("label", run.label)
    meta.setdefault("prompt_tokens", run.prompt_tokens)
    if run.result is not None:
        meta.setdefault("text", run.result.text)
        meta.setdefault("generated_token_ids", list(run.result.generated_token_ids))
    return trace


def trace_json(trace: Trace) -> bytes:
    """The bytes `Trace.save` writes, so `Trace.load` (and the explorer's Load trace) reads them back."""
    return json.dumps(trace.to_dict(), indent=1, default=str).encode("utf-8")


def trace_export(run: Run) -> Export:
    return Export(f"kvlab_trace_{run_name(run)}.json", trace_json(saved_trace(run)), MIME["json"])


def table_csv(rows: list[dict]) -> bytes:
    """The summary table (`summary.rows_for`) as CSV: the table's columns, then the full run label."""
    fields = [f for f, _ in columns_for(rows)] + ["label", "stopped"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({f: "" if row.get(f) is None else row.get(f) for f in fields})
    return out.getvalue().encode("utf-8")


def table_export(rows: list[dict], run: Run) -> Export:
    return Export(f"kvlab_table_{run_name(run)}.csv", table_csv(rows), MIME["csv"])


def figure_export(png: bytes, run: Run) -> Export:
    return Export(f"kvlab_figure_{run_name(run)}.png", png, MIME["png"])


def links_html(exports: list[Export]) -> str:
    if not exports:
        return ""
    return (
        '<div class="kvlab-downloads-list" style="font-size:12px">'
        + html.escape(_("ready to save (click to download):"))
        + " "
        + "".join(e.link() for e in exports)
        + "</div>"
    )


# -- loading -----------------------------------------------------------------------------------------------------
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


def uploaded_files(value) -> list[tuple[str, bytes]]:
    """(name, bytes) of each file in a `FileUpload.value` (ipywidgets 8: a tuple of dicts with a memoryview)."""
    files = value.values() if isinstance(value, dict) else value  # ipywidgets 7 used {name: {...}}
    return [(f.get("name") or f.get("metadata", {}).get("name", "trace.json"), bytes(f["content"])) for f in files]


def loaded_run(trace: Trace, name: str) -> Run:
    """A finished `Run` made from a saved trace: drawn, tabled, compared and saved again like a live one.

    It has no model or cache object behind it (`run.loaded_from` is the file name): cropping it is refused.
    """
    from kvlab.recorded_run import RunResult  # torch: the app loads a trace once its warm-up has imported it

    meta = trace.meta
    options = meta.get("options") if isinstance(meta.get("options"), dict) else {}
    request = RunRequest(
        model=str(meta.get("model", "?")),
        dtype=str(meta.get("dtype", "float32")),
        cache=str(meta.get("cache_kind", "?")),
        options=dict(options),
        past_recording=bool(meta.get("past_recording", False)),
        max_new_tokens=_int(meta.get("new_tokens")),
    )
    ids = meta.get("generated_token_ids")
    ids = [int(i) for i in ids] if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else []
    new_tokens = _int(meta.get("new_tokens"), len(ids))
    seconds = meta.get("seconds") if isinstance(meta.get("seconds"), (int, float)) else 0.0
    result = RunResult(
        request.model,
        request.cache,
        request.options,
        request.dtype,
        _int(meta.get("prompt_tokens")),
        ids,
        str(meta.get("text", "")),
        float(seconds),
        trace,
    )
    return Run(
        request,
        trace=trace,
        new_ids=ids,
        result=result,
        prompt_tokens=_int(meta.get("prompt_tokens")),
        done=True,
        loaded_from=name,
        new_tokens_loaded=new_tokens,
    )


def _int(value, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
