"""Every notebook is reviewed through its paired jupytext percent script, so the two must say the same thing.

A notebook edited in Jupyter without re-syncing (or a script edited without regenerating the notebook) would
let a reviewer approve code that is not what runs and what the committed outputs show. This test reads both
forms with jupytext and compares cell by cell: type, source and tags.
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
IPYNBS = sorted(NOTEBOOKS.glob("*.ipynb")) + sorted(NOTEBOOKS.glob("pt-BR/*.ipynb"))  # English, then Portuguese


def _cells(notebook) -> list[tuple[str, str, tuple]]:
    """(cell type, source without trailing blank lines, sorted tags) for every non-empty cell."""
    cells = []
    for cell in notebook.cells:
        source = cell.source.rstrip()
        if not source:
            continue
        cells.append((cell.cell_type, source, tuple(sorted(cell.metadata.get("tags", [])))))
    return cells


def test_there_are_notebooks():
    assert IPYNBS, f"no notebooks found in {NOTEBOOKS}"


@pytest.mark.parametrize("ipynb", IPYNBS, ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def test_notebook_has_paired_script(ipynb: Path):
    script = ipynb.with_suffix(".py")
    assert script.exists(), f"{ipynb.name} has no paired script {script.name} (jupytext --set-formats ipynb,py:percent)"
    formats = jupytext.read(ipynb).metadata.get("jupytext", {}).get("formats", "")
    assert "py:percent" in formats, f"{ipynb.name} is not paired with a percent script (formats={formats!r})"


@pytest.mark.parametrize("ipynb", IPYNBS, ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def test_paired_cells_match(ipynb: Path):
    script = ipynb.with_suffix(".py")
    if not script.exists():
        pytest.skip("no paired script (reported by test_notebook_has_paired_script)")
    from_ipynb = _cells(jupytext.read(ipynb))
    from_script = _cells(jupytext.read(script, fmt="py:percent"))
    for index, (a, b) in enumerate(zip(from_ipynb, from_script)):
        assert a == b, f"{ipynb.name} cell {index} differs from {script.name}:\n--- ipynb\n{a}\n--- py\n{b}"
    assert len(from_ipynb) == len(from_script), (
        f"{ipynb.name} has {len(from_ipynb)} cells, {script.name} has {len(from_script)}; re-sync with "
        f"`jupytext --sync {script}`"
    )


def test_every_script_has_a_notebook():
    orphans = [p.name for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")) if not p.with_suffix(".ipynb").exists()]
    assert not orphans, f"scripts without a notebook (run jupytext --to ipynb): {orphans}"
