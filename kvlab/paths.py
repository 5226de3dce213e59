"""Where kvlab keeps what it prepares: converted models, downloaded wheels.

Everything lives under one directory so that a user can see (and delete) it in one place.
`KVLAB_HOME` overrides the default `~/.cache/kvlab`.
"""

from __future__ import annotations

import os
from pathlib import Path


def kvlab_home() -> Path:
    """The root of kvlab's cache, created on first use."""
    home = Path(os.environ.get("KVLAB_HOME") or Path.home() / ".cache" / "kvlab").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def models_dir() -> Path:
    path = kvlab_home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def downloads_dir() -> Path:
    path = kvlab_home() / "downloads"
    path.mkdir(parents=True, exist_ok=True)
    return path
