"""A prepared bundled model in miniature: the tiny llama's safetensors, a word-level tokenizer and kvlab's marker,
under a KVLAB_HOME in tmp_path, named `smollm2`. The real 540 MB directory is never copied or damaged here."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest

import kvlab
import kvlab.models as models
from kvlab.models import manifest
from kvlab.models.convert import MARKER
from kvlab.models.manifest import write_manifest


@pytest.fixture(scope="session")
def prepared_template(tmp_path_factory) -> Path:
    """The files a conversion leaves (no manifest yet): built once, copied by each test."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as token_models
    from transformers import PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("prepared") / "smollm2"
    kvlab.tiny_model("tiny-llama").save_pretrained(directory)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{chr(97 + i): 4 + i for i in range(26)}}
    tokenizer = Tokenizer(token_models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    ).save_pretrained(directory)
    (directory / MARKER).write_text(json.dumps({"name": "smollm2", "title": "SmolLM2-135M-Instruct"}))
    return directory


@pytest.fixture
def settled(monkeypatch):
    """A 50 ms window for a file's last change to settle before its identity is recorded (the real one is 2 s, for
    FAT's timestamps: see manifest.RACY_S); 50 ms is still longer than any Linux timestamp tick."""
    monkeypatch.setattr(manifest, "RACY_S", 0.05)


def wait_until_settled() -> None:
    time.sleep(manifest.RACY_S + 0.02)


@pytest.fixture
def settle():
    """settle(): wait until the files just written are older than the (test's) window, so they get recorded."""
    return wait_until_settled


@pytest.fixture
def model_dir(tmp_path, monkeypatch, prepared_template, settled) -> Path:
    """A freshly prepared `smollm2` (manifest and identities recorded) under KVLAB_HOME=tmp_path/home, with no
    source on this machine (no GGUF, no wheel): damage can only be refused."""
    home = tmp_path / "home"
    directory = home / "models" / "smollm2"
    shutil.copytree(prepared_template, directory)
    write_manifest(directory)
    monkeypatch.setenv("KVLAB_HOME", str(home))
    return directory


@pytest.fixture
def source_at_hand(monkeypatch, prepared_template) -> list[str]:
    """Make smollm2's verified source 'present': a re-conversion copies the template and records its manifest, as
    `convert_gguf` does after its real 17 s conversion. Returns the GGUF names it was called with."""
    calls = []

    def convert_again(gguf: Path, directory: Path, source: dict) -> Path:
        calls.append(gguf.name)
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(prepared_template, directory)
        write_manifest(directory)
        return directory

    spec = dataclasses.replace(
        models.BUNDLED["smollm2"], source_at_hand=lambda d: True, fetch_gguf=lambda d: d / "SmolLM2.gguf"
    )
    monkeypatch.setitem(models.BUNDLED, "smollm2", spec)
    monkeypatch.setattr(models, "convert_gguf", convert_again)
    return calls


@pytest.fixture
def xor_byte():
    """xor_byte(path, offset, mask): a context manager that damages one byte and restores it."""
    return _xor_byte


@contextlib.contextmanager
def _xor_byte(path: Path, offset: int, mask: int):
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
