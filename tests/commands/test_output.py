"""`--output FILE` (`kvlab.commands.Output`), as a user meets it through `kvlab.cli.main`: the file is written
atomically, so a full disk leaves the FILE that was there byte for byte and says so in one line naming it
(status 1, the machine's failure); a path that could not be written is refused before the report is made."""

from __future__ import annotations

import errno
import json
import os

from kvlab.cli import main

SIZE = ["size", "--model", "llama-2-7b", "--tokens", "4096", "--dtype", "float16", "--json"]


def no_space(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_output_on_a_full_disk_keeps_the_old_file_and_names_it_in_one_line(tmp_path, capsys, monkeypatch):
    target = tmp_path / "size.json"
    assert main([*SIZE, "--output", str(target)]) == 0
    earlier = target.read_bytes()
    capsys.readouterr()

    monkeypatch.setattr(os, "fsync", no_space)
    assert main([*SIZE, "--tokens", "8192", "--output", str(target)]) == 1
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert err == (
        f"kvlab size: error: cannot write {target}: No space left on device; the file that was there is unchanged\n"
    )
    assert target.read_bytes() == earlier and json.loads(earlier)  # still the earlier, whole, JSON result
    assert [p.name for p in tmp_path.iterdir()] == ["size.json"]  # no temporary file left beside it


def test_output_replaces_a_longer_file_whole(tmp_path, capsys):
    target = tmp_path / "size.json"
    target.write_text("x" * 100_000)
    assert main([*SIZE, "--output", str(target)]) == 0
    assert json.loads(target.read_text())["tokens"] == 4096  # no tail of the old content
    assert capsys.readouterr().err == f"wrote {target}\n"


def test_output_naming_a_directory_is_refused_in_one_line(tmp_path, capsys):
    assert main([*SIZE, "--output", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"kvlab size: error: cannot write {tmp_path}: it is a directory; name a file\n"
