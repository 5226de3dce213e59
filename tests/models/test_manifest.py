"""A damaged prepared model is never used: every test damages a COPY of the prepared SmolLM2 directory (under
tmp_path, reached through KVLAB_HOME), never ~/.cache/kvlab, and restores the byte it changed afterwards."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kvlab.models as models
from kvlab.cli import main
from kvlab.models import convert
from kvlab.models.manifest import MANIFEST, ModelIntegrityError, _sample_offsets, fast_check, full_check

WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def pristine() -> Path:
    """The prepared SmolLM2 under the real KVLAB_HOME: read, never written."""
    return models.prepare("smollm2", warm_quanto=False)


@pytest.fixture(scope="module")
def home(tmp_path_factory, pristine) -> Path:
    """A KVLAB_HOME holding a copy of the prepared SmolLM2 (no GGUF, no wheel: its source is not at hand)."""
    home = tmp_path_factory.mktemp("kvlab-home")
    shutil.copytree(pristine, home / "models" / "smollm2")
    return home


@pytest.fixture
def model_dir(home, monkeypatch) -> Path:
    monkeypatch.setenv("KVLAB_HOME", str(home))
    directory = home / "models" / "smollm2"
    if not (directory / MANIFEST).exists():
        models.record_manifest(directory, "SmolLM2")
    return directory


@contextlib.contextmanager
def xor_byte(path: Path, offset: int, mask: int):
    """Flip the bits `mask` of one byte in place, and put it back whatever happens."""
    with open(path, "r+b") as f:
        f.seek(offset)
        original = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([original ^ mask]))
    try:
        yield
    finally:
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(bytes([original]))


def header(path: Path) -> tuple[int, dict]:
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return 8 + length, json.loads(f.read(length))


def float_in(path: Path, tensor: str, near: int) -> int:
    """The offset of the highest byte (sign + exponent) of a float32 of `tensor` at or after file offset `near`."""
    start, entries = header(path)
    begin, end = (start + o for o in entries[tensor]["data_offsets"])
    assert entries[tensor]["dtype"] == "F32" and begin <= near < end - 4
    return begin + (near - begin) // 4 * 4 + 3


def tensor_at(path: Path, offset: int) -> str:
    start, entries = header(path)
    return next(
        name
        for name, e in entries.items()
        if name != "__metadata__" and start + e["data_offsets"][0] <= offset < start + e["data_offsets"][1] - 4
    )


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_flipped_byte_in_a_tensor_name_is_refused_before_loading(model_dir, capsys):
    # Before: the renamed tensor was not found, so transformers left that weight randomly initialised, silently.
    weights = model_dir / WEIGHTS
    start, _ = header(weights)
    name_at = weights.read_bytes()[:start].index(b'"model.layers.3.mlp.down_proj.weight"') + 10
    with xor_byte(weights, name_at, 0x01):
        with pytest.raises(ModelIntegrityError) as refused:
            models.load("smollm2")
        message = str(refused.value)
        assert "\n" not in message and "header" in message and "kvlab models prepare smollm2" in message
        # the command line refuses it before loading anything, in one line, with status 2
        assert main(["run", "--model", "smollm2", "--cache", "dynamic", "--prompt", "Hi", "--max-new-tokens", "2"]) == 2
        assert "kvlab models prepare smollm2" in one_line_error(capsys)
    fast_check(model_dir)  # the byte is back: the copy is sound again


def test_a_flipped_exponent_bit_in_a_weight_is_refused(model_dir, capsys):
    # Before: the model loaded and one logit moved, with no warning.
    weights = model_dir / WEIGHTS
    start, _ = header(weights)
    size = weights.stat().st_size
    sampled = _sample_offsets(start, size)[20] + 100  # inside a block the load-time check hashes
    with xor_byte(weights, float_in(weights, tensor_at(weights, sampled), sampled), 0x40):
        with pytest.raises(ModelIntegrityError, match="weights differ from the manifest"):
            models.load("smollm2")
    # between the sampled blocks only the full check (kvlab models verify) sees a flipped bit
    blocks = _sample_offsets(start, size)
    between = (blocks[30] + blocks[31]) // 2
    with xor_byte(weights, float_in(weights, tensor_at(weights, between), between), 0x40):
        with pytest.raises(ModelIntegrityError, match="different sha256"):
            full_check(model_dir)
        assert main(["models", "verify", "smollm2"]) == 2
        err = one_line_error(capsys)
        assert "SmolLM2-135M-Instruct is damaged" in err and "to prepare it again: kvlab models prepare smollm2" in err
    assert main(["models", "verify", "smollm2"]) == 0
    assert "every file matches its manifest" in capsys.readouterr().out


def test_a_truncated_file_is_refused_in_one_line(model_dir):
    # Before: the load ended in a raw SafetensorError.
    weights = model_dir / WEIGHTS
    size = weights.stat().st_size
    with open(weights, "rb") as f:
        f.seek(size - 64)
        tail = f.read()
    os.truncate(weights, size - 64)
    try:
        with pytest.raises(ModelIntegrityError, match=f"is {size - 64} bytes, the manifest says {size}"):
            models.load("smollm2")
    finally:
        with open(weights, "ab") as f:
            f.write(tail)
    assert weights.stat().st_size == size


def test_a_model_prepared_before_manifests_gets_one_and_is_then_checked(model_dir, capsys):
    (model_dir / MANIFEST).unlink()
    assert models.prepare("smollm2", warm_quanto=False, refetch=False) == model_dir
    assert "prepared by an earlier kvlab" in capsys.readouterr().err
    recorded = json.loads((model_dir / MANIFEST).read_text())["files"]
    assert set(recorded) == {p.name for p in model_dir.iterdir() if p.name != MANIFEST}
    assert recorded[WEIGHTS]["size"] == (model_dir / WEIGHTS).stat().st_size
    full_check(model_dir)
    # a structurally broken legacy directory is not blessed: the header no longer tiles the file
    (model_dir / MANIFEST).unlink()
    with open(model_dir / WEIGHTS, "ab") as f:
        f.write(b"\0" * 8)
    try:
        with pytest.raises(ModelIntegrityError, match="truncated or padded"):
            models.prepare("smollm2", warm_quanto=False, refetch=False)
        assert not (model_dir / MANIFEST).exists()
    finally:
        os.truncate(model_dir / WEIGHTS, (model_dir / WEIGHTS).stat().st_size - 8)
        models.record_manifest(model_dir, "SmolLM2")


def test_a_damaged_model_is_converted_again_when_its_source_is_at_hand(model_dir, pristine, monkeypatch, capsys):
    calls = []

    def convert_again(gguf, directory, source):  # stands in for the 17 s GGUF conversion of the real source
        calls.append(directory)
        shutil.copyfile(pristine / "config.json", directory / "config.json")
        return directory

    spec = dataclasses.replace(
        models.BUNDLED["smollm2"], source_at_hand=lambda d: True, fetch_gguf=lambda d: d / "x.gguf"
    )
    monkeypatch.setitem(models.BUNDLED, "smollm2", spec)
    monkeypatch.setattr(models, "convert_gguf", convert_again)
    with xor_byte(model_dir / "config.json", 5, 0x20):
        models.prepare("smollm2", warm_quanto=False, refetch=False)
        fast_check(model_dir)  # sound again, while the damage would still be there without the re-conversion
    assert calls == [model_dir]
    assert (
        "config.json has a different sha256 than the manifest records); converting it again" in capsys.readouterr().err
    )


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
