"""`python -m tools.architecture_facts`: the stored facts are rewritten whole or not at all."""

import errno
import json
import os

import pytest

from kvlab.atomic import AtomicWriteError
from kvlab.size.architecture import known_architectures
from tools.architecture_facts import write_derived_facts


def test_rederiving_onto_a_full_disk_keeps_the_stored_facts(tmp_path, monkeypatch):
    path = write_derived_facts(tmp_path / "architectures_derived.json")
    stored = path.read_bytes()
    assert set(json.loads(stored)["models"]) == set(known_architectures())

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(AtomicWriteError, match=f"cannot write {path}: No space left on device"):
        write_derived_facts(path)
    monkeypatch.undo()
    assert path.read_bytes() == stored and [p.name for p in tmp_path.iterdir()] == [path.name]
