"""Where kvlab keeps what it prepares (converted models, downloaded wheels): one directory a user can see and
delete, `KVLAB_HOME` or `~/.cache/kvlab`. Reading needs no write access; a home that preparing cannot write is
refused in one line naming KVLAB_HOME, not a PermissionError from deep inside a conversion."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kvlab.errors import KvlabUserError
from kvlab.i18n import _


class KvlabHomeError(KvlabUserError, RuntimeError):
    pass


def kvlab_home(create: bool = True) -> Path:
    home = Path(os.environ.get("KVLAB_HOME") or Path.home() / ".cache" / "kvlab").expanduser()
    return _make(home) if create else home


def _refusal(problem: str) -> KvlabHomeError:
    home = kvlab_home(create=False)
    if os.environ.get("KVLAB_HOME"):
        where = f"KVLAB_HOME={home}"
    else:
        where = _("kvlab's cache (default ~/.cache/kvlab; set KVLAB_HOME): {home}").format(home=home)
    return KvlabHomeError(
        _("{where} {problem}; set KVLAB_HOME to a writable directory").format(where=where, problem=problem)
    )


def _make(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _refusal(
            _("cannot be created ({reason}: {path})").format(
                reason=err.strerror or type(err).__name__, path=err.filename or path
            )
        ) from None
    return path


def check_writable_home(path: Path | None = None) -> Path:
    """Refuse, before any work, a directory under KVLAB_HOME that cannot be written (a file to write is
    `kvlab.atomic.check_writable`'s)."""
    path = _make(path if path is not None else kvlab_home())
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise _refusal(_("is not writable ({reason})").format(reason=err.strerror or err)) from None
    return path


def models_dir(create: bool = True) -> Path:
    path = kvlab_home(create) / "models"
    return _make(path) if create else path


def downloads_dir(create: bool = True) -> Path:
    path = kvlab_home(create) / "downloads"
    return _make(path) if create else path
