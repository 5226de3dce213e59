"""Writing a file so that a reader only ever sees the old content or the new one, never half of either: the bytes
go to a temporary file in the same directory (so `os.replace` is an atomic rename), are fsynced, then replace the
target. A failed write leaves the old file as it was, and the error names the file the user asked for."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from kvlab.errors import KvlabEnvironmentError
from kvlab.i18n import _

_UMASK = os.umask(0o022)  # read once at import: reading the umask means setting it, which would race with threads
os.umask(_UMASK)


class AtomicWriteError(KvlabEnvironmentError, OSError):
    """A file could not be written; the file that was there (if any) is unchanged."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno 28]" prefix
        return self.strerror or super().__str__()


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with open_atomic(path, "wb") as handle:
        handle.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    return write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """A handle on a temporary file beside `path` that replaces `path` when the block ends without an error: for
    writers that stream (`with open_atomic(p) as f: fig.savefig(f)`)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"open_atomic writes a whole file: mode 'wb' or 'w', not {mode!r}")
    named = Path(path)
    target = Path(os.path.realpath(named))  # through a symlink: the file it points to is replaced, the link stays
    directory, existed = target.parent, target.exists()
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise _named(err, named, existed) from err
    try:
        with os.fdopen(descriptor, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _keep_mode(target, temporary)
        os.replace(temporary, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(err, OSError) and not isinstance(err, AtomicWriteError):
            raise _named(err, named, existed) from err
        raise
    _sync_directory(directory)


def check_writable(path: str | os.PathLike) -> Path:
    """Refuse, before any work, a file kvlab could not write later (a directory, or in a missing or read-only one)."""
    target = Path(path)
    directory = Path(os.path.realpath(target)).parent
    if target.is_dir():
        reason = _("it is a directory; name a file")
    elif directory.exists() and not directory.is_dir():
        reason = _("{directory} is a file, not a directory").format(directory=directory)
    elif not directory.is_dir():
        reason = _("the directory {directory} does not exist").format(directory=directory)
    else:
        reason = unwritable(directory)
    if reason is not None:
        raise AtomicWriteError(_("cannot write {target}: {reason}").format(target=target, reason=reason))
    return target


def unwritable(directory: Path) -> str | None:
    """Why no file can be created in `directory`, None if one can. Creating one is the only sure test, root included
    (os.access says yes to root for /proc and read-only mounts); `kvlab.paths` probes KVLAB_HOME with it too."""
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".kvlab-", suffix=".probe", dir=directory)
    except OSError as err:
        return err.strerror or type(err).__name__
    os.close(descriptor)
    os.unlink(probe)
    return None


def _named(err: OSError, target: Path, existed: bool) -> AtomicWriteError:
    reason = err.strerror or str(err) or type(err).__name__
    if existed:
        message = _("cannot write {target}: {reason}; the file that was there is unchanged")
    else:
        message = _("cannot write {target}: {reason}")
    named = AtomicWriteError(err.errno, message.format(target=target, reason=reason))
    named.filename = str(target)
    return named


def _keep_mode(target: Path, temporary: str) -> None:
    """mkstemp creates 0600; a replaced file keeps its permissions, a new one gets the umask's."""
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    os.chmod(temporary, mode)


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable where the platform allows (POSIX directories open read-only)."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
