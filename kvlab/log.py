"""Where kvlab's notices go: the logger "kvlab" (modules log below it): waits and problems are warnings, progress
lines info. As in transformers, it has its own handler, so a notebook shows `kvlab: message` on stderr without
configuring logging (`logging.lastResort` would not while the root has a handler, nor say who talks); it writes to
the `sys.stderr` of the moment and does not propagate, so a user's root handler does not print notices twice.
`propagate = True` routes them into the user's logging; `setLevel(INFO)` shows progress, as `progress_shown` does.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

ROOT = "kvlab"


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever `sys.stderr` is when a record is emitted."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr


def _configure() -> logging.Logger:
    root = logging.getLogger(ROOT)
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("kvlab: %(message)s"))
        root.addHandler(handler)
        if root.level == logging.NOTSET:  # a level the user set before kvlab was imported stays
            root.setLevel(logging.WARNING)
        root.propagate = False
    return root


def get_logger(name: str) -> logging.Logger:
    _configure()
    return logging.getLogger(name)


@contextlib.contextmanager
def progress_shown() -> Iterator[None]:
    """Within the block, kvlab's progress lines (info) are shown too, as the command line does."""
    root = _configure()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.setLevel(level)
