"""The two kinds of failure kvlab reports to a person, and the one line it reports them in.

Every error class kvlab defines subclasses one of these two mixins beside its builtin base
(`class CacheOptionError(KvlabUserError, ValueError)`), so `except ValueError` keeps working while the command
line and the explorer catch one name each instead of a list that a new error could be missing from
(`tests/test_errors.py` fails on a kvlab error class that subclasses neither). This module imports nothing:
`kvlab size` and `kvlab --help` catch these without loading torch.
"""

from __future__ import annotations


class KvlabUserError(Exception):
    """The input was wrong (an option, a model name, a file to read): the message names what is valid; exit 2."""


class KvlabEnvironmentError(Exception):
    """The machine or the install failed the request (network, disk, a missing extra): exit 1."""


def one_line(err: BaseException) -> str:
    """An error as the single line the command line and the explorer show (some messages span several)."""
    if isinstance(err, OSError) and err.strerror:  # "No space left on device: /path", not "[Errno 28] ..."
        named = err.filename is None or str(err.filename) in err.strerror  # AtomicWriteError names it already
        return " ".join((err.strerror if named else f"{err.strerror}: {err.filename}").split())
    return " ".join(str(err).split()) or type(err).__name__
