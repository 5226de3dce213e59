"""The flow of ARCHITECTURE.md holds: no module of kvlab imports from a line of the flow below its own.

The layers are read from ARCHITECTURE.md's flow block itself, not from a copy here, so the picture a reader sees
and the rule this test enforces cannot disagree: moving a module means redrawing the block, in the same change.
Each line of the block that names `kvlab/...` paths is one layer, top to bottom; a path ending in `/` is a
package (all its modules), one ending in `.py` a module (the most specific path wins, so a leaf such as
`kvlab/measure/timing.py` can sit above its package). Every import counts: at the top of a module, inside a
function (a lazy import is still an arrow), and `importlib.import_module` of a constant name. Only
`if TYPE_CHECKING:` blocks are left out: type checkers read them, Python never runs them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kvlab"

# Arrows that run up the flow today, each waiting for its move: (importing module, imported module).
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


def _flow() -> list[list[str]]:
    """The flow block's layers, top first: each the `kvlab/...` paths named on one line."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text[text.index("## The flow") :]
    start = section.index("```\n") + 4
    block = section[start : section.index("```", start)]
    layers = [re.findall(r"kvlab/[\w/.]*", line) for line in block.splitlines()]
    return [[path.rstrip(".") for path in layer] for layer in layers if layer]


def _unit_name(path: str) -> str:
    """`kvlab/caches/` -> `kvlab.caches`, `kvlab/live.py` -> `kvlab.live`, `kvlab/__init__.py` -> `kvlab`."""
    name = path.removesuffix("/").removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def _modules() -> dict[str, Path]:
    """Every module of kvlab by its dotted name (a package by its `__init__.py`)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()
LAYERS = _flow()
LAYER_OF = {_unit_name(path): number for number, layer in enumerate(LAYERS) for path in layer}
PACKAGE_UNITS = {_unit_name(path) for layer in LAYERS for path in layer if path.endswith("/")}


def _unit(module: str) -> str | None:
    """The most specific unit of the flow that holds `module`: itself if named, else its nearest named package."""
    if module in LAYER_OF:
        return module
    parts = module.split(".")
    for end in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:end]) in PACKAGE_UNITS:
            return ".".join(parts[:end])
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _dynamic_target(node: ast.Call) -> str | None:
    """`importlib.import_module("kvlab.x")`, or `f"kvlab.x.{name}"` (then some module of `kvlab.x`)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name != "import_module" or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(".")
    return None


def _imports(module: str, path: Path, *, in_functions: bool = True) -> list[tuple[int, str]]:
    """(line, imported module) for every import of a kvlab module in `path`, `from a import b` resolved to the
    submodule `a.b` when there is one, relative imports to absolute names. `in_functions=False`: only what runs
    when the module is imported."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                children: list[ast.AST] = list(child.orelse)
            else:
                children = [child]
            for each in children:
                record(each)
                if in_functions or not isinstance(each, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(each)

    def record(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if sub in MODULES else base))
        elif isinstance(node, ast.Call) and (target := _dynamic_target(node)):
            found.append((node.lineno, target))

    visit(ast.parse(path.read_text(), filename=str(path)))
    return [(line, target) for line, target in found if target == "kvlab" or target.startswith("kvlab.")]


def _arrows() -> list[tuple[str, str, str]]:
    """(where, importer, imported) for every import that crosses from one unit of the flow to another."""
    arrows = []
    for module, path in MODULES.items():
        for line, target in _imports(module, path):
            if _unit(target) != _unit(module):  # inside one package (or one module) any import goes
                arrows.append((f"{path.relative_to(ROOT)}:{line}", module, target))
    return arrows


def _runs_up(importer: str, imported: str) -> bool:
    """An import from a line at or below the importer's own (a line's units do not import each other); an import
    of no module of kvlab (a misspelt name) is named by the first test, not here."""
    unit = _unit(imported)
    return unit is not None and LAYER_OF[unit] >= LAYER_OF[_unit(importer)]


def test_the_flow_names_every_module_once_and_only_what_exists():
    named = [path for layer in LAYERS for path in layer]
    assert len(LAYERS) > 10 and len(named) == len(set(named))
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
    assert sorted(m for m in MODULES if _unit(m) is None) == []
    assert sorted(f"{where}: {imported}" for where, _, imported in _arrows() if _unit(imported) is None) == []


def test_no_import_runs_up_the_flow():
    up = [
        f"{where}: {importer} imports {imported} (line {LAYER_OF[_unit(imported)]} of the flow, "
        f"importer on line {LAYER_OF[_unit(importer)]})"
        for where, importer, imported in _arrows()
        if _runs_up(importer, imported) and (importer, imported) not in KNOWN_EXCEPTIONS
    ]
    assert up == []


def test_every_known_exception_is_still_an_arrow_up_the_flow():
    """A moved module's entry is removed with the move, so the list never excuses an arrow that comes back."""
    live = {(importer, imported) for _, importer, imported in _arrows() if _runs_up(importer, imported)}
    assert sorted(KNOWN_EXCEPTIONS - live) == []


def test_a_module_above_its_package_does_not_pull_the_package_in():
    """Importing `kvlab.measure.timing` runs `kvlab/measure/__init__.py` first: a package whose module sits on a
    higher line than the package itself may import, at its top, only from lines above that module."""
    pulled = []
    for unit, layer in LAYER_OF.items():
        parent = unit.rpartition(".")[0]
        if parent in ("", "kvlab") or _unit(parent) == unit:
            continue  # every module pulls in the facade, `kvlab/__init__.py`: it imports what it exports lazily
        for line, target in _imports(parent, MODULES[parent], in_functions=False):
            if _unit(target) != unit and LAYER_OF[_unit(target)] >= layer:
                pulled.append(f"{MODULES[parent].relative_to(ROOT)}:{line}: {target} (pulled in by {unit})")
    assert pulled == []


def test_the_reader_of_imports_sees_lazy_imports_and_skips_type_checking_blocks(tmp_path):
    """The rules above are only as good as the reader: a function-level import counts, a TYPE_CHECKING one not."""
    source = tmp_path / "sample.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from kvlab.explorer import app\n"
        "else:\n"
        "    import kvlab.units\n"
        "def f():\n"
        "    from kvlab import _compat, run\n"
        "    from . import names\n"
        "    return importlib.import_module(f'kvlab.commands.{f}')\n"
    )
    assert _imports("kvlab.sample", source) == [
        (6, "kvlab.units"),
        (8, "kvlab._compat"),
        (8, "kvlab"),
        (9, "kvlab.names"),
        (10, "kvlab.commands"),
    ]


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_no_import_cycle():
    """No module of kvlab imports, even through others, a module that imports it back: inside one package too,
    where the flow allows any import, and in a function too (a lazy import hides a cycle, it does not remove it).
    A module importing its own package's `__init__` is no cycle unless that `__init__` imports it back."""
    imports = {module: _imports(module, path) for module, path in MODULES.items()}
    graph = {module: {t for _, t in found if t in MODULES and t != module} for module, found in imports.items()}
    reach = {module: _reachable(graph, module) for module in graph}
    cycles = {frozenset(m for m in reach[start] if start in reach[m]) for start in graph if start in reach[start]}
    assert (
        sorted(
            sorted(
                {
                    f"{MODULES[a].relative_to(ROOT)}:{line}: {a} imports {b}"
                    for a in c
                    for line, b in imports[a]
                    if b in c
                }
            )
            for c in cycles
        )
        == []
    )
