"""A conversion that does not finish leaves nothing a later prepare could mistake for a prepared model."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kvlab.models as models
from kvlab.cli import main
from kvlab.models import convert

WEIGHTS = "model.safetensors"


def test_an_interrupted_conversion_leaves_nothing_and_exits_130(tmp_path, monkeypatch, capsys):
    import transformers

    monkeypatch.setenv("KVLAB_HOME", str(tmp_path))
    spec = dataclasses.replace(models.BUNDLED["smollm2"], fetch_gguf=lambda d: d / "SmolLM2.gguf")
    monkeypatch.setitem(models.BUNDLED, "smollm2", spec)

    class HalfSaved:
        config = type("Config", (), {})()

        def save_pretrained(self, directory, **kwargs):
            Path(directory).mkdir(parents=True)
            (Path(directory) / WEIGHTS).write_bytes(b"\0" * (1 << 20))  # a partial write, then Ctrl-C
            raise KeyboardInterrupt

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: HalfSaved())
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: None)
    assert main(["models", "prepare", "smollm2"]) == 130
    err = capsys.readouterr().err
    assert err.endswith("kvlab models: interrupted\n") and "Traceback" not in err  # after the progress lines
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["gguf"]  # no partial directory left


def test_stale_partials_of_killed_processes_are_removed_on_the_next_prepare(model_dir):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = model_dir.parent / f"smollm2.partial-{dead.pid}"
    alive = model_dir.parent / "smollm2.partial-1"  # pid 1 always runs: another prepare's work in progress
    stale_gguf = model_dir.parent / "gguf" / f"SmolLM2.gguf.partial-{dead.pid}"
    for path in (stale, alive):
        path.mkdir()
        (path / WEIGHTS).write_bytes(b"\0" * 1024)
    stale_gguf.parent.mkdir(exist_ok=True)
    stale_gguf.write_bytes(b"\0" * 1024)
    try:
        models.prepare("smollm2", warm_quanto=False, refetch=False)
        assert not stale.exists() and not stale_gguf.exists() and alive.exists()
    finally:
        shutil.rmtree(alive, ignore_errors=True)
        shutil.rmtree(stale, ignore_errors=True)
    assert convert.partial_path(model_dir).name == f"smollm2.partial-{os.getpid()}"
