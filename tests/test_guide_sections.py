"""The notebooks teach the guide's own API: every section of the cache guide maps to notebook cells that run it.

`data/guide_sections.json` is the project's list of the guide's sections (pt-BR titles, as the users read them)
and the API each section's sample code teaches. A section counts as taught when each of its API strings stands in
a code cell (not in a comment) of one of its notebooks, and one of them carries the pt-BR title in a heading.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = json.loads((ROOT / "data" / "guide_sections.json").read_text())["sections"]
GUIDE = ROOT.parent / "shared" / "guide"


def code_lines(notebook: str) -> str:
    nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
    lines = (line for cell in nb.cells if cell.cell_type == "code" for line in cell.source.splitlines())
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def headings(notebook: str) -> list[str]:
    nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
    return [
        line
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("#")
    ]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s["english"])
def test_every_api_of_the_section_runs_in_a_code_cell(section):
    code = "\n".join(code_lines(name) for name in section["notebooks"])
    missing = [api for api in section["api"] if api not in code]
    assert not missing, f"{section['title']!r}: no code cell of {section['notebooks']} runs {missing}"


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s["english"])
def test_a_heading_carries_the_guide_title(section):
    found = [h for name in section["notebooks"] for h in headings(name) if section["title"] in h]
    assert found, f"no heading in {section['notebooks']} carries the guide's title {section['title']!r}"


def test_the_list_covers_every_section_of_the_guide():
    """Each listed title is a section of the guide text (when the guide is beside the checkout, as in CI)."""
    texts = list(GUIDE.glob("*.txt"))
    if not texts:
        pytest.skip(f"the guide is not at {GUIDE}")
    lines = {line.strip() for line in texts[0].read_text().splitlines()}
    assert [s["title"] for s in SECTIONS if s["title"] not in lines] == []
    assert len(SECTIONS) == 11
