"""JupyterLab on a trimmed copy of one tutorial notebook, for the live-control browser tests.

The copy keeps the notebook's metadata and only the code cells a live control needs (the first code cell, which
imports and loads the models, plus the cells named by a piece of their source), so a test runs seconds of work
rather than the whole notebook. Same hygiene as the explorer's `lab_server` (conftest.py): 127.0.0.1 only, a
token, `port_retries=0`, temporary Jupyter directories, a copy served (Lab autosaves), stopped by pid.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from .conftest import REPO, serving_lab

KERNEL_IDLE = re.compile(r"Python 3 \(ipykernel\) \| Idle")


def trimmed_copy(src: Path, dst: Path, needles: list[str]) -> int:
    """Write `src` to `dst` with the first code cell and every code cell containing one of `needles`, outputs
    cleared; returns the number of cells kept. Each needle must match exactly one cell."""
    notebook = json.loads(src.read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    source = ["".join(cell["source"]) for cell in code]
    for needle in needles:
        hits = sum(needle in text for text in source)
        if hits != 1:
            raise ValueError(f"{src.name}: {needle!r} is in {hits} code cells, expected 1")
    kept = [cell for i, cell in enumerate(code) if i == 0 or any(needle in source[i] for needle in needles)]
    for cell in kept:
        cell["outputs"], cell["execution_count"] = [], None
    notebook["cells"] = kept
    dst.write_text(json.dumps(notebook, indent=1))
    return len(kept)


@contextlib.contextmanager
def lab_on(tmp_path: Path, notebook: str, needles: list[str]):
    """Yield (server, number of code cells) for JupyterLab serving a trimmed copy of notebooks/`notebook`."""
    kept = []
    with serving_lab(
        tmp_path, lambda root: kept.append(trimmed_copy(REPO / "notebooks" / notebook, root / notebook, needles))
    ) as server:
        yield server, kept[0]


def run_all_cells(page, server, notebook: str, cells: int) -> None:
    """Open `notebook` in Lab, wait for the kernel to be connected and idle, run its `cells` code cells in order."""
    page.goto(server.url(f"/lab/tree/{notebook}"))
    # Lab reads "Idle" before the kernel is connected: wait for "<kernel> | Idle" in the status bar.
    page.get_by_text(KERNEL_IDLE).wait_for(timeout=120_000)
    page.locator(".jp-Notebook .jp-CodeCell").first.locator(".jp-InputArea-editor").click()
    for _ in range(cells):
        page.keyboard.press("Shift+Enter")  # runs the cell and moves to the next


def set_slider(control, value: int) -> None:
    """Type `value` into an ipywidgets slider's readout and press Enter (one change, as on release)."""
    readout = control.locator(".widget-readout")
    readout.click()
    readout.press("Control+a")
    readout.type(str(value))
    readout.press("Enter")
