"""The README's layout and ARCHITECTURE.md describe the tree as it is: every path they name exists, and every
module and package of kvlab is in the README's layout (a newcomer reads the folders from there)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kvlab"
NOT_DESCRIBED = {"__init__.py", "__main__.py", "_version.py", "py.typed", "data", "__pycache__"}


def _layout_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Tests and layout") :]
    return section[section.index("```") + 3 : section.index("```", section.index("```") + 3)]


def _named_paths(text: str) -> set[str]:
    """Paths a text names: `kvlab/x/`, `kvlab/x.py`, and bare `y.py` after a kvlab path on the same line."""
    found = set()
    for line in text.splitlines():
        folder = None
        for word in re.findall(r"[\w./-]+", line):
            if word.startswith(("kvlab/", "notebooks/", "tests/", "tools/")):
                found.add(word.rstrip("."))
                folder = word.rsplit("/", 1)[0] if word.endswith(".py") else None
            elif folder and word.endswith(".py"):
                found.add(f"{folder}/{word}")
    return found


def test_every_path_the_readme_layout_names_exists():
    named = _named_paths(_layout_block())
    assert len(named) > 20
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_every_module_and_package_of_kvlab_is_in_the_readme_layout():
    named = _named_paths(_layout_block())
    entries = {p.name for p in PACKAGE.iterdir()} - NOT_DESCRIBED
    absent = sorted(e for e in entries if f"kvlab/{e}" not in named and f"kvlab/{e}/" not in named)
    assert absent == []


def test_every_path_architecture_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    top = ("kvlab/", "tests/", "notebooks/", "tools/")
    named = {p if p.startswith(top) else f"kvlab/{p}" for p in _backticked(text)}
    assert len(named) > 10
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def _backticked(text: str) -> set[str]:
    """`path.py` and `folder/` spans (file paths, not code): relative ones are under kvlab/."""
    spans = re.findall(r"`([\w/.-]+(?:\.py|/))`", text)
    return {s.replace("<package>", "") for s in spans if "<" not in s}
