"""The two kinds of failure kvlab reports to a person, and the one line it reports them in. Every kvlab error
class subclasses one beside its builtin base (`class CacheOptionError(KvlabUserError, ValueError)`), so the command
line and the explorer catch one name each. No imports: `kvlab --help` catches these without loading torch."""

from __future__ import annotations


class KvlabUserError(Exception):
    """The input was wrong (an option, a model name, a file to read): the message names what is valid; exit 2."""


class KvlabEnvironmentError(Exception):
    """The machine or the install failed the request (network, disk, a missing extra): exit 1."""


def one_line(err: BaseException) -> str:
    """An error as the one line the command line and the explorer show."""
    if isinstance(err, OSError) and err.strerror:  # "No space left on device: /path", not "[Errno 28] ..."
        named = err.filename is None or str(err.filename) in err.strerror  # AtomicWriteError names it already
        return " ".join((err.strerror if named else f"{err.strerror}: {err.filename}").split())
    return " ".join(str(err).split()) or type(err).__name__
