"""`kvlab.atomic`: a reader sees the old file or the new one, never half of either; a failed write (a full disk)
leaves the old file byte for byte, no temporary file beside it, and an error that names the file.

The full disk is real where the tests run as root and may mount a 64 KiB tmpfs (`tiny_disk`); everywhere else,
and for the cases a real disk cannot stage on demand, `os.fsync` or the handle's `write` fails with ENOSPC.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import uuid

import pytest

from kvlab.atomic import AtomicWriteError, check_writable, open_atomic, write_bytes, write_text


def no_space(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def leftovers(directory) -> list[str]:
    """What a failed write could have left beside the target: its temporary files (`.name.XXXX.tmp`)."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def good(tmp_path):
    """An existing good file: a small JSON document, read-only for the group and others (0644 -> 0640)."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"rows": [1, 2, 3]}))
    path.chmod(0o640)
    return path


def _mount(directory, options: str) -> bool:
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 64 KiB file system (tmpfs), or a skip where mounting one is not allowed (not root, a container)."""
    directory = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    directory.mkdir()
    if not _mount(directory, "size=64k"):
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN); the ENOSPC tests stand in")
    yield directory
    subprocess.run(["umount", str(directory)], check=True)


def fill(directory) -> None:
    """Fill the file system under `directory` until it has no byte left."""
    with open(directory / "filler", "wb", buffering=0) as handle:  # unbuffered: nothing is left to flush
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC
    assert os.statvfs(directory).f_bavail == 0


# -- the target is replaced whole ----------------------------------------------------------------------------
def test_write_text_and_write_bytes_replace_the_whole_file(good):
    assert write_text(good, "short") == good and good.read_text() == "short"  # no tail of the longer old text
    assert write_bytes(good, b"\x00\x01") == good and good.read_bytes() == b"\x00\x01"
    assert leftovers(good.parent) == []


def test_a_new_file_is_created_with_the_umask_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        path = write_text(tmp_path / "new.txt", "é")
    finally:
        os.umask(umask)
    assert path.read_bytes() == "é".encode() and stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600


def test_a_replaced_file_keeps_its_permissions(good):
    write_text(good, "{}")
    assert stat.S_IMODE(good.stat().st_mode) == 0o640


def test_open_atomic_streams_into_the_target_only_when_the_block_ends(good):
    before = good.read_bytes()
    with open_atomic(good, "w") as handle:
        handle.write("new ")
        assert good.read_bytes() == before  # a reader meanwhile sees the old file, whole
        handle.write("content")
    assert good.read_text() == "new content" and leftovers(good.parent) == []


def test_open_atomic_refuses_modes_that_do_not_write_a_whole_file(good):
    for mode in ("a", "r+b", "x"):
        with pytest.raises(ValueError, match="mode 'wb' or 'w'"):
            with open_atomic(good, mode):
                pass


# -- a failed write leaves the old file ------------------------------------------------------------------------
def test_a_full_disk_leaves_the_old_file_loadable_and_names_it(tiny_disk):
    path = tiny_disk / "trace.json"
    original = json.dumps({"events": list(range(2000))}).encode()  # ~10 KB of a 64 KiB disk
    path.write_bytes(original)
    fill(tiny_disk)
    with pytest.raises(AtomicWriteError) as caught:
        write_bytes(path, original * 4)
    err = caught.value
    assert err.errno == errno.ENOSPC and err.filename == str(path)
    assert str(err) == f"cannot write {path}: No space left on device; the file that was there is unchanged"
    assert path.read_bytes() == original and json.loads(path.read_bytes())["events"][-1] == 1999
    assert leftovers(tiny_disk) == []


def test_a_failing_fsync_leaves_the_old_file_byte_identical(good, monkeypatch):
    original = good.read_bytes()
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(AtomicWriteError) as caught:
        write_bytes(good, b"{}" * 5000)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(good)
    assert good.read_bytes() == original and json.loads(original) == {"rows": [1, 2, 3]}
    assert stat.S_IMODE(good.stat().st_mode) == 0o640 and leftovers(good.parent) == []


def test_a_write_that_fills_the_disk_halfway_leaves_the_old_file_byte_identical(good):
    original = good.read_bytes()
    with pytest.raises(AtomicWriteError) as caught:
        with open_atomic(good) as handle:  # a streaming writer (savefig, write_po) whose disk fills up midway
            handle.write(b"{" * 4096)
            handle.flush()
            no_space()
    assert caught.value.errno == errno.ENOSPC and str(caught.value).startswith(f"cannot write {good}: No space")
    assert good.read_bytes() == original and leftovers(good.parent) == []


def test_an_error_inside_the_block_is_raised_as_it_is_and_writes_nothing(good):
    original = good.read_bytes()
    with pytest.raises(KeyError):  # a bug in the writer, not a disk problem: not renamed, not swallowed
        with open_atomic(good) as handle:
            handle.write(b"partial")
            raise KeyError("boom")
    assert good.read_bytes() == original and leftovers(good.parent) == []


def test_the_error_is_an_oserror_that_names_the_target_not_the_temporary_file(good, monkeypatch):
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError) as caught:  # callers that catch OSError keep working
        write_text(good, "x")
    assert isinstance(caught.value, AtomicWriteError) and ".tmp" not in str(caught.value)
    assert str(caught.value).startswith(f"cannot write {good}: ") and "\n" not in str(caught.value)


def test_a_missing_directory_fails_naming_the_file(tmp_path):
    target = tmp_path / "no-such-dir" / "out.json"
    with pytest.raises(AtomicWriteError, match=f"cannot write {target}: No such file or directory"):
        write_text(target, "x")
    assert not target.parent.exists()


# -- check_writable: refused before any work ---------------------------------------------------------------------
def test_check_writable_accepts_a_new_or_existing_file_and_writes_nothing(tmp_path, good):
    assert check_writable(tmp_path / "new.json") == tmp_path / "new.json" and not (tmp_path / "new.json").exists()
    before = good.read_bytes()
    assert check_writable(good) == good and good.read_bytes() == before


def test_check_writable_refuses_a_missing_directory(tmp_path):
    target = tmp_path / "missing" / "out.json"
    with pytest.raises(AtomicWriteError, match=f"cannot write {target}: the directory {target.parent} does not"):
        check_writable(target)


def test_check_writable_refuses_a_directory(tmp_path):
    with pytest.raises(AtomicWriteError, match=f"cannot write {tmp_path}: it is a directory; name a file"):
        check_writable(tmp_path)


def test_check_writable_refuses_a_path_under_a_regular_file(good):
    with pytest.raises(AtomicWriteError, match=f"cannot write {good / 'x'}: {good} is a file, not a directory"):
        check_writable(good / "x")


def test_a_write_through_a_symlink_replaces_the_file_it_points_to_and_keeps_the_link(tmp_path, good):
    link = tmp_path / "link.json"
    link.symlink_to(good)
    write_text(link, "new")
    assert link.is_symlink() and good.read_text() == "new"


def test_a_failed_first_write_does_not_claim_an_old_file(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(AtomicWriteError) as caught:
        write_text(tmp_path / "new.json", "x")
    assert str(caught.value) == f"cannot write {tmp_path / 'new.json'}: No space left on device"


def test_check_writable_refuses_a_read_only_file_system(tmp_path):
    directory = tmp_path / "ro"
    directory.mkdir()
    if not _mount(directory, "size=64k,ro"):
        pytest.skip("cannot mount a read-only tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        with pytest.raises(AtomicWriteError, match=f"cannot write {directory / 'x.json'}: Read-only file system"):
            check_writable(directory / "x.json")
    finally:
        subprocess.run(["umount", str(directory)], check=True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission bits")
def test_check_writable_refuses_a_directory_without_write_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(AtomicWriteError, match="Permission denied"):
            check_writable(locked / "x.json")
    finally:
        locked.chmod(0o700)


def test_check_writable_refuses_a_directory_where_no_file_can_be_created():
    """Root included: os.access says yes to root for /proc, so the check creates (and removes) a probe file."""
    with pytest.raises(AtomicWriteError):
        write_text("/proc/kvlab-atomic-test.json", "x")  # the write does fail ...
    with pytest.raises(AtomicWriteError):
        check_writable("/proc/kvlab-atomic-test.json")  # ... so the check before the work should refuse it
