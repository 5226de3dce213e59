"""Where kvlab keeps what it prepares: converted models, downloaded wheels.

Everything lives under one directory so that a user can see (and delete) it in one place.
`KVLAB_HOME` overrides the default `~/.cache/kvlab`. Reading needs no write access (a shared, read-only
KVLAB_HOME of prepared models works); only preparing writes, and a home that cannot be written is refused in
one line naming KVLAB_HOME instead of a PermissionError from deep inside a conversion.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kvlab.errors import KvlabUserError


class KvlabHomeError(KvlabUserError, RuntimeError):
    """KVLAB_HOME (or the default) cannot be created or written."""


def kvlab_home(create: bool = True) -> Path:
    """The root of kvlab's cache, created on first use unless `create` is False."""
    home = Path(os.environ.get("KVLAB_HOME") or Path.home() / ".cache" / "kvlab").expanduser()
    if create:
        _make(home)
    return home


def _describe(home: Path) -> str:
    where = "KVLAB_HOME" if os.environ.get("KVLAB_HOME") else "kvlab's cache (default ~/.cache/kvlab; set KVLAB_HOME)"
    return f"{where}={home}" if where == "KVLAB_HOME" else f"{where}: {home}"


def _make(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        home = kvlab_home(create=False)
        raise KvlabHomeError(
            f"{_describe(home)} cannot be created ({err.strerror or type(err).__name__}: "
            f"{err.filename or path}); set KVLAB_HOME to a writable directory"
        ) from None


def check_writable(path: Path | None = None) -> Path:
    """Refuse, in one line, a directory under KVLAB_HOME that cannot be written (before any work is done)."""
    path = path if path is not None else kvlab_home()
    _make(path)
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise KvlabHomeError(
            f"{_describe(kvlab_home(create=False))} is not writable ({err.strerror or err}); "
            "set KVLAB_HOME to a writable directory"
        ) from None
    return path


def models_dir(create: bool = True) -> Path:
    path = kvlab_home(create) / "models"
    if create:
        _make(path)
    return path


def downloads_dir(create: bool = True) -> Path:
    path = kvlab_home(create) / "downloads"
    if create:
        _make(path)
    return path
