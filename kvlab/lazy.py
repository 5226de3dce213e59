"""Names a package exports but imports only on first use (PEP 562), so that importing the package stays light.

A package lists each export once, as an import in its `if TYPE_CHECKING:` block: type checkers and IDEs read it
there, and `exports` reads the same block from the package's source (on the first lookup) to import each name
from its module when it is first used:

    if TYPE_CHECKING:
        from kvlab.caches.factory import make_cache

    __getattr__, __dir__ = lazy.exports(__name__)
"""

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
        """Each exported name: (its module, relative ones with their dots; its name there)."""
        import ast

        found = {}
        for node in ast.parse(Path(module.__file__).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for each in node.body:
                    if isinstance(each, ast.ImportFrom):
                        source = "." * each.level + (each.module or "")
                        found.update({alias.asname or alias.name: (source, alias.name) for alias in each.names})
        return found

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
