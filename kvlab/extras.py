"""Optional parts of kvlab and the extra that installs each (`explore`: Voila; `lab`: JupyterLab; `models`: the
bundled Gemma 3 package; `test`), for one-line messages when one is missing."""

from __future__ import annotations

import importlib

from kvlab.errors import KvlabEnvironmentError
from kvlab.i18n import _


class MissingExtraError(KvlabEnvironmentError, ImportError):
    """A part of kvlab whose packages are not installed; the message names the extra that installs them."""


def require(module: str, extra: str, what: str):
    """Import `module` or raise MissingExtraError: "<what> needs the '<extra>' extra: pip install 'kvlab[<extra>]'"."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        if err.name is not None and err.name != module and not module.startswith(f"{err.name}."):
            raise  # the module is there but broken: a genuine problem, not a missing extra
        raise MissingExtraError(
            _("{what} needs the '{extra}' extra: pip install 'kvlab[{extra}]'").format(what=what, extra=extra)
        ) from None
