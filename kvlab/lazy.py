"""Names a package exports but imports on first use (PEP 562), so that importing the package stays light. Each is
listed once, as an import in the package's `if TYPE_CHECKING:` block, where type checkers read it too, and the
package ends with `__getattr__, __dir__ = lazy.exports(__name__)`."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exports(package: str, submodules: bool = False) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose `__all__` is then the names its TYPE_CHECKING block imports.
    With `submodules`, any other name of a submodule is imported too (`kvlab.caches` after `import kvlab`)."""
    module = sys.modules[package]

    @functools.cache
    def names() -> dict[str, tuple[str, str]]:
        """Each export: (its module, relative ones with their dots; its name there)."""
        import ast

        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        blocks = [n.body for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
        imports = [each for body in blocks for each in body if isinstance(each, ast.ImportFrom)]
        return {a.asname or a.name: ("." * i.level + (i.module or ""), a.name) for i in imports for a in i.names}

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            return sorted(names())
        if name in names():
            source, original = names()[name]
            value = getattr(importlib.import_module(source, package), original)
            setattr(module, name, value)  # later lookups skip __getattr__
            return value
        if submodules and not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(names()))

    return __getattr__, __dir__
