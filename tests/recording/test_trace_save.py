"""`Trace.save` onto an existing good trace: a save that fails (the disk fills up) leaves the old trace loadable,
byte for byte, and says which file it could not write; a save that works replaces it whole."""

from __future__ import annotations

import errno
import os

import pytest
import torch

import kvlab
from kvlab import _compat
from kvlab.atomic import AtomicWriteError
from kvlab.recording.trace import Trace


@pytest.fixture(scope="module")
def recorded() -> Trace:
    """A real trace: tiny-llama generating 3 tokens through an instrumented static cache."""
    model = kvlab.tiny_model("tiny-llama")
    cache = kvlab.make_cache("static", model.config, max_cache_len=16)
    prompt = torch.randint(3, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    model.generate(prompt, **{_compat.CACHE_KWARG: cache}, max_new_tokens=3, do_sample=False, pad_token_id=0)
    return cache.trace


def test_a_save_that_fills_the_disk_leaves_the_old_trace_loadable(tmp_path, recorded, monkeypatch):
    path = recorded.save(tmp_path / "trace.json")
    good = path.read_bytes()
    longer = Trace(recorded.events * 3, {**recorded.meta, "note": "a longer trace"})

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(AtomicWriteError) as caught:
        longer.save(path)
    assert str(caught.value) == f"cannot write {path}: No space left on device; the file that was there is unchanged"
    monkeypatch.undo()

    assert path.read_bytes() == good and [p.name for p in tmp_path.iterdir()] == ["trace.json"]
    loaded = Trace.load(path)
    assert loaded.events == recorded.events and loaded.summary() == recorded.summary()


def test_a_save_that_works_replaces_the_trace_whole(tmp_path, recorded):
    path = Trace(recorded.events * 3, dict(recorded.meta)).save(tmp_path / "trace.json")
    recorded.save(path)  # shorter than what was there: no tail of the longer trace may remain
    assert Trace.load(path).events == recorded.events
