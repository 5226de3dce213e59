"""Executing the committed notebooks, and stamping each with the code its outputs came from.

`jupytext --update` keeps old outputs when a script's code changes, so only a stamp taken at execution can tell
stale outputs: the digest of the code cells that ran goes into `metadata.kvlab.executed_code_sha256`, which
`tests/test_notebook_truth.py` recomputes. The same run checks every figure a cell shows for text that overflows
or overlaps (`tools.figure_check`), into `metadata.kvlab.figure_overflow` ([] when every figure fits), and
records every text a reader sees on each figure (titles, labels, legends, annotations, tick labels as drawn) into
`metadata.kvlab.figure_texts`, which `tests/i18n/test_figure_words.py` reads for English left in a pt-BR figure.

    python -m tools.notebook_exec notebooks/03_offloading.ipynb [more.ipynb ...] [--env KVLAB_COMPILE=1]

Each notebook runs in a fresh kernel in its own directory; a cell that raises leaves the file as it was.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from kvlab.atomic import write_text
from kvlab.errors import KvlabEnvironmentError

ROOT = Path(__file__).resolve().parents[1]  # the repository

CELL_TIMEOUT_S = 1500  # the longest cells (timing sweeps on a 2-core CPU) take minutes; a hung kernel does not
STAMP = "executed_code_sha256"
FIGURE_OVERFLOW = "figure_overflow"
FIGURE_TEXTS = "figure_texts"
_SEPARATOR = "\n\x1e\n"  # ASCII record separator: no code cell contains it, so cell boundaries stay in the digest


class NotebookExecutionError(KvlabEnvironmentError, RuntimeError):
    """A cell of a notebook raised (or timed out); the notebook file was not written."""


def code_digest(nb) -> str:
    """sha256 of the code cells' sources, in order, without markdown (fixing a sentence does not make the outputs
    stale) and trailing whitespace (jupytext does not keep it stable)."""
    sources = [cell.source.rstrip() for cell in nb.cells if cell.cell_type == "code"]
    return hashlib.sha256(_SEPARATOR.join(sources).encode("utf-8")).hexdigest()


def _by_cell(nb, findings: Path, path: Path) -> list[dict]:
    """A list the kernel's figure check wrote (its overflow findings, or its figure texts), each entry under the
    index of the cell that showed its figure."""
    if not findings.is_file():
        raise NotebookExecutionError(
            f"{path}: the figure check did not start in the kernel (tools.figure_check could not be imported "
            "there?); the notebook file is unchanged"
        )
    cells = {cell.execution_count: index for index, cell in enumerate(nb.cells) if cell.cell_type == "code"}
    found = json.loads(findings.read_text(encoding="utf-8"))
    return [{"cell": cells.get(finding.pop("execution_count")), **finding} for finding in found]


def execute(path: str | os.PathLike, env: dict[str, str] | None = None) -> Path:
    """Run the notebook at `path` in a fresh kernel and write it back with its outputs, stamp, figure findings and
    figure texts;
    `env` adds to this process's environment, for the kernel only."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # timings of an earlier run would be stale, and they make every diff noisy
        cell.metadata.pop("execution", None)
    running = {"cell": None}
    with tempfile.TemporaryDirectory(prefix="kvlab-figures-") as side:
        findings, texts = Path(side) / "figure_overflow.json", Path(side) / "figure_texts.json"
        # The figure check starts before any cell (so before matplotlib's inline backend registers its flush), as one
        # expression, so the learner's namespace gains no name.
        check = "__import__('tools.figure_check', fromlist=['record_in_kernel'])"
        check += f".record_in_kernel(get_ipython(), {str(findings)!r}, {str(texts)!r})"
        client = NotebookClient(
            nb,
            timeout=CELL_TIMEOUT_S,
            kernel_name="python3",
            record_timing=False,
            extra_arguments=[f"--IPKernelApp.exec_lines={check}"],
            resources={"metadata": {"path": str(path.resolve().parent)}},
            on_cell_execute=lambda cell, cell_index: running.update(cell=cell_index),
        )
        # the kernel runs in the notebook's folder: the repository root on its path finds `tools`
        path_entries = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        try:
            client.execute(env={**os.environ, "PYTHONPATH": os.pathsep.join(path_entries), **(env or {})})
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
            index = running["cell"]
            reason = f"{err.ename}: {err.evalue}" if isinstance(err, CellExecutionError) else type(err).__name__
            first_line = nb.cells[index].source.strip().splitlines()[0] if index is not None else ""
            raise NotebookExecutionError(
                f"{path}: cell {index} ({first_line!r}) failed with {reason}; the notebook file is unchanged"
            ) from err
        overflow, shown = _by_cell(nb, findings, path), _by_cell(nb, texts, path)
    stamps = {STAMP: code_digest(nb), FIGURE_OVERFLOW: overflow, FIGURE_TEXTS: shown}
    nb.metadata.setdefault("kvlab", {}).update(stamps)
    write_text(path, nbformat.writes(nb) + "\n")  # nbformat.write's own layout: a re-run diff shows outputs only
    return path


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--env takes KEY=VALUE, not {text!r}")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.notebook_exec",
        description="Execute notebooks one at a time, in place, and stamp the code their outputs came from.",
    )
    parser.add_argument("notebooks", nargs="+", type=Path, help=".ipynb files, run in the order given")
    parser.add_argument(
        "--env", action="append", type=_setting, default=[], metavar="KEY=VALUE", help="set for the kernels"
    )
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.notebooks if not path.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    for done, path in enumerate(args.notebooks):
        print(f"executing {path}", flush=True)
        try:
            execute(path, dict(args.env))
        except NotebookExecutionError as err:
            rest = args.notebooks[done + 1 :]
            skipped = f" (not run: {', '.join(map(str, rest))})" if rest else ""
            print(f"error: {err}{skipped}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
