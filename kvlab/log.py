"""Where kvlab's notices go: the logger "kvlab" (each module logs under its own name below it).

Notices that announce a wait or a problem (a model being converted or downloaded, optimum-quanto's one-minute
build, a damaged model converted again) are warnings; progress lines (conversion steps, pip's output) are info.
As in transformers, the library's own logger carries one handler, so a notebook or a script shows the warnings as
`kvlab: message` on stderr without configuring logging: Python's `logging.lastResort` would print them too, but
not while any other handler is set on the root logger (pytest's, a notebook extension's), and without the
`kvlab:` that says who is talking. The handler writes to the `sys.stderr` of the moment (a notebook's, a test's
capture), and the logger does not propagate, so a root handler a user configures does not print each notice twice;
`logging.getLogger("kvlab").propagate = True` routes them into the user's logging instead, and `setLevel(INFO)`
shows the progress lines, as the command line does (`progress_shown`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

ROOT = "kvlab"


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever `sys.stderr` is when a record is emitted, not when the handler was made."""

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
    """`logging.getLogger(name)` for a kvlab module, with the "kvlab" logger's handler in place."""
    _configure()
    return logging.getLogger(name)


@contextlib.contextmanager
def progress_shown() -> Iterator[None]:
    """Within the block, kvlab's progress lines (info) are shown too: what the command line does for a command."""
    root = _configure()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.setLevel(level)
