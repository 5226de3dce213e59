"""Where kvlab keeps what it prepares (converted models, downloaded wheels): one directory a user can see and
delete, `KVLAB_HOME` or `~/.cache/kvlab`. Reading needs no write access; a home that preparing cannot write is
refused in one line naming KVLAB_HOME, not a PermissionError from deep inside a conversion."""

from __future__ import annotations

import os
from pathlib import Path

from kvlab.atomic import unwritable
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
    """Refuse, before any work, a directory under KVLAB_HOME that cannot be written."""
    path = _make(path if path is not None else kvlab_home())
    if (reason := unwritable(path)) is not None:
        raise _refusal(_("is not writable ({reason})").format(reason=reason))
    return path


def models_dir(create: bool = True) -> Path:
    path = kvlab_home(create) / "models"
    return _make(path) if create else path


def downloads_dir(create: bool = True) -> Path:
    path = kvlab_home(create) / "downloads"
    return _make(path) if create else path
