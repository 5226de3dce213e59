"""A changed prepared model is never used: every test damages a tiny prepared `smollm2` under tmp_path (see
conftest.py), never ~/.cache/kvlab."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

import kvlab.models as models
from kvlab import atomic
from kvlab.cli import main
from kvlab.models import manifest
from kvlab.models.convert import MARKER
from kvlab.models.manifest import MANIFEST, VERIFIED, ModelIntegrityError, check, full_check

WEIGHTS = "model.safetensors"
FIX = "kvlab models prepare smollm2"


def model_files(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.name != MANIFEST and not p.name.startswith("."))


def recorded(model_dir: Path) -> dict:
    return json.loads((model_dir / VERIFIED).read_text())["files"]


def top_byte_of_a_float(path: Path, near: int) -> int:
    """The offset of the highest byte (sign + exponent) of the float32 at or after file offset `near`."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        entries = json.loads(f.read(length))
    start = 8 + length
    for name, entry in entries.items():
        begin, end = (start + o for o in entry["data_offsets"]) if name != "__metadata__" else (0, 0)
        if begin <= near < end - 4:
            assert entry["dtype"] == "F32"
            return begin + (near - begin) // 4 * 4 + 3
    raise AssertionError(f"no tensor at byte {near}")


def refused(model_dir: Path) -> str:
    with pytest.raises(ModelIntegrityError) as error:
        models.prepare("smollm2", warm_quanto=False, refetch=False)  # what every load runs first
    message = str(error.value)
    assert "\n" not in message and message.startswith("SmolLM2-135M-Instruct is not used: ") and message.endswith(FIX)
    return message


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_byte_flipped_anywhere_in_any_prepared_file_is_refused_naming_the_file(model_dir, xor_byte, settle):
    # Before: the load hashed 64 sampled 4 KiB blocks of the weights; a byte between them loaded silently.
    names = model_files(model_dir)
    assert {WEIGHTS, MARKER, "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(names)
    for name in names:
        path = model_dir / name
        size = path.stat().st_size
        for offset in sorted({0, size // 3, size // 2, size - 1}):
            with xor_byte(path, offset, 0xFF):
                message = refused(model_dir)
            assert f"{path} has changed since it was checked: its sha256 is not the manifest's" in message
    settle()
    assert check(model_dir) == names  # every byte is back: each file changed since its check is hashed once more
    assert check(model_dir) == []  # and recorded


def test_the_issues_weight_of_minus_4608_is_refused_by_the_load_and_the_command_line(model_dir, xor_byte, capsys):
    # Before: XOR 0xFF on a float's top byte in the middle of the weights changed the greedy tokens, silently.
    weights = model_dir / WEIGHTS
    with xor_byte(weights, top_byte_of_a_float(weights, weights.stat().st_size // 2), 0xFF):
        with pytest.raises(ModelIntegrityError, match=f"{weights} has changed since it was checked.*{FIX}"):
            models.load("smollm2")
        assert main(["run", "--model", "smollm2", "--cache", "dynamic", "--prompt", "ab", "--max-new-tokens", "2"]) == 2
        assert str(weights) in (err := one_line_error(capsys)) and FIX in err
    model, tokenizer = models.load("smollm2")  # the byte is back
    assert type(model).__name__ == "LlamaForCausalLM" and tokenizer("ab").input_ids == [4, 5]


def test_a_write_that_puts_the_mtime_back_is_still_seen(model_dir, xor_byte):
    weights = model_dir / WEIGHTS
    before = weights.stat()
    with xor_byte(weights, weights.stat().st_size // 2, 0x01):
        os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = weights.stat()
        assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
        assert f"{weights} has changed since it was checked" in refused(model_dir)  # the ctime moved


def test_an_unchanged_directory_is_not_read_and_a_touched_identical_file_is_hashed_once_and_recorded(
    model_dir, monkeypatch, settle
):
    real_sha256_of = manifest.sha256_of
    hashed = []
    monkeypatch.setattr(manifest, "sha256_of", lambda path: hashed.append(path.name) or real_sha256_of(path))
    assert check(model_dir) == [] and hashed == []  # identities as recorded: no file is read
    weights = model_dir / WEIGHTS
    old = recorded(model_dir)[WEIGHTS]
    os.utime(weights, ns=(old["mtime_ns"] - 10**9, old["mtime_ns"] - 10**9))  # a touch: same bytes, a new mtime
    settle()
    assert models.prepare("smollm2", warm_quanto=False, refetch=False) == model_dir  # loads
    assert hashed == [WEIGHTS]
    new = recorded(model_dir)[WEIGHTS]
    assert (new["size"], new["ino"], new["mtime_ns"]) == (old["size"], old["ino"], old["mtime_ns"] - 10**9)
    assert new["ctime_ns"] != old["ctime_ns"]
    assert check(model_dir) == [] and hashed == [WEIGHTS]  # recorded: the next load reads nothing
    model, _ = models.load("smollm2")
    assert type(model).__name__ == "LlamaForCausalLM"


def test_a_file_changed_within_the_timestamp_tick_is_hashed_again_until_it_settles(model_dir, settle):
    weights = model_dir / WEIGHTS
    os.utime(weights)  # now: a second write in this tick could leave the identity as it is
    assert check(model_dir) == [WEIGHTS]
    assert WEIGHTS not in recorded(model_dir)
    assert check(model_dir) == [WEIGHTS]
    settle()
    assert check(model_dir) == [WEIGHTS] and WEIGHTS in recorded(model_dir)
    assert check(model_dir) == []


def test_a_truncated_file_is_refused_in_one_line(model_dir):
    # Before: the load ended in a raw SafetensorError.
    weights = model_dir / WEIGHTS
    size = weights.stat().st_size
    os.truncate(weights, size - 64)
    assert f"{weights} is {size - 64} bytes, the manifest says {size}" in refused(model_dir)


def test_a_file_the_manifest_does_not_list_or_a_missing_one_is_refused(model_dir):
    extra = model_dir / "added_tokens.json"
    extra.write_text("{}")
    assert f"{extra} is not in the manifest" in refused(model_dir)
    extra.unlink()
    (model_dir / "tokenizer.json").unlink()
    assert f"{model_dir / 'tokenizer.json'} is missing" in refused(model_dir)


def damage_manifest(model_dir: Path, how: str) -> None:
    path = model_dir / MANIFEST
    if how == "missing":
        path.unlink()
    elif how == "unreadable":  # root reads a 000 file anyway: a directory in its place cannot be read by anyone
        path.unlink()
        path.mkdir()
    elif how == "not JSON":
        path.write_bytes(b"\xff\xfe{ not json")
    elif how == "truncated":
        path.write_text(path.read_text()[:-40])
    elif how == "not a manifest":
        path.write_text(json.dumps({"kvlab_manifest": 99, "files": {}}))
    elif how == "a JSON list":
        path.write_text("[]")


MANIFEST_DAMAGE = ["missing", "unreadable", "not JSON", "truncated", "not a manifest", "a JSON list"]


@pytest.mark.parametrize("how", MANIFEST_DAMAGE)
def test_a_missing_or_unreadable_manifest_is_refused_when_the_source_is_not_at_hand(model_dir, how, capsys):
    # Before: a directory without a manifest was re-recorded from whatever was on disk (after a structure check).
    damage_manifest(model_dir, how)
    message = refused(model_dir)
    assert str(model_dir / MANIFEST) in message
    with pytest.raises(ModelIntegrityError, match=FIX):
        models.load("smollm2")
    assert main(["models", "verify", "smollm2"]) == 2
    assert str(model_dir / MANIFEST) in (err := one_line_error(capsys)) and FIX in err
    assert how != "missing" or not (model_dir / MANIFEST).exists()  # nothing was recorded from the files on disk


@pytest.mark.parametrize("how", MANIFEST_DAMAGE)
def test_a_missing_or_unreadable_manifest_is_converted_again_from_the_source_at_hand(
    model_dir, source_at_hand, how, xor_byte, capsys
):
    damage_manifest(model_dir, how)
    with xor_byte(model_dir / WEIGHTS, 1000, 0xFF):  # damage that a manifest recorded from disk would bless
        assert models.prepare("smollm2", warm_quanto=False, refetch=False) == model_dir
        assert source_at_hand == ["SmolLM2.gguf"]
        assert f"{model_dir / MANIFEST}" in (err := capsys.readouterr().err) and "converting it again" in err
        full_check(model_dir)  # converted again: every byte matches the new manifest
    # xor_byte wrote the new file's own byte back: a change of identity, not of content, so it loads
    model, _ = models.load("smollm2")
    assert type(model).__name__ == "LlamaForCausalLM" and source_at_hand == ["SmolLM2.gguf"]


def test_a_damaged_model_is_converted_again_when_its_source_is_at_hand(model_dir, source_at_hand, xor_byte, capsys):
    with xor_byte(model_dir / "config.json", 5, 0x20):
        models.prepare("smollm2", warm_quanto=False, refetch=False)
        check(model_dir)  # sound again, while the damage would still be there without the re-conversion
    assert source_at_hand == ["SmolLM2.gguf"]
    assert "config.json has changed since it was checked" in capsys.readouterr().err


def test_a_damaged_or_foreign_record_of_identities_costs_a_hash_never_trust(model_dir, xor_byte):
    files = model_files(model_dir)
    (model_dir / VERIFIED).write_text("{ not json")
    assert check(model_dir) == files
    assert check(model_dir) == []
    # a record of the current identities, but written for another manifest: void
    record = json.loads((model_dir / VERIFIED).read_text())
    with xor_byte(model_dir / WEIGHTS, 100, 0x01):
        record["files"][WEIGHTS] = manifest.identity(model_dir / WEIGHTS)
        record["manifest_sha256"] = "0" * 64
        atomic.write_text(model_dir / VERIFIED, json.dumps(record))
        assert "model.safetensors has changed" in refused(model_dir)


def test_verify_hashes_every_byte_whatever_the_identities_say(model_dir, xor_byte, capsys):
    # damage no identity shows (as bit rot under the file system would): the load check cannot see it, verify does
    weights = model_dir / WEIGHTS
    with xor_byte(weights, weights.stat().st_size // 2, 0x40):
        record = json.loads((model_dir / VERIFIED).read_text())
        record["files"][WEIGHTS] = manifest.identity(weights)
        atomic.write_text(model_dir / VERIFIED, json.dumps(record))
        assert check(model_dir) == []
        with pytest.raises(ModelIntegrityError, match="its sha256 is not the manifest's"):
            full_check(model_dir)
        assert main(["models", "verify", "smollm2"]) == 2
        err = one_line_error(capsys)
        assert f"SmolLM2-135M-Instruct is damaged: {weights}" in err and f"to prepare it again: {FIX}" in err
    assert main(["models", "verify", "smollm2"]) == 0
    assert "every file matches its manifest" in capsys.readouterr().out


def test_an_earlier_manifest_with_sha256_only_still_verifies_and_protects(model_dir, xor_byte):
    text = json.loads((model_dir / MANIFEST).read_text())
    # what kvlab wrote before: sha256 and sampled fingerprints
    text["files"][WEIGHTS].update(header_sha256="0" * 64, sample_sha256="0" * 64)
    (model_dir / MANIFEST).write_text(json.dumps({**text, "kvlab_manifest": 1}))
    (model_dir / VERIFIED).unlink()
    assert check(model_dir) == model_files(model_dir)  # hashed once (sha256), then recorded
    assert check(model_dir) == []
    full_check(model_dir)
    with xor_byte(model_dir / WEIGHTS, 4096, 0x10):
        assert "its sha256 is not the manifest's" in refused(model_dir)


def test_a_directory_that_cannot_record_identities_still_loads_and_says_so(model_dir, monkeypatch, capsys, settle):
    os.utime(model_dir / WEIGHTS, ns=(1, 1))
    settle()

    def read_only(path, text, encoding="utf-8"):
        raise atomic.AtomicWriteError(30, f"cannot write {path}: Read-only file system")

    monkeypatch.setattr(atomic, "write_text", read_only)
    assert check(model_dir) == [WEIGHTS]
    assert "cannot be recorded" in one_line_error(capsys)
    assert check(model_dir) == [WEIGHTS]  # hashed again: nothing unverified is trusted


def test_a_file_that_changes_while_it_is_hashed_is_refused(model_dir, monkeypatch):
    weights = model_dir / WEIGHTS
    os.utime(weights, ns=(1, 1))
    real_sha256_of = manifest.sha256_of

    def written_meanwhile(path):
        result = real_sha256_of(path)
        os.utime(path, ns=(2, 2))
        return result

    monkeypatch.setattr(manifest, "sha256_of", written_meanwhile)
    with pytest.raises(ModelIntegrityError, match=f"{weights} changed while it was being hashed"):
        check(model_dir)


def test_a_local_directory_with_a_manifest_is_checked_and_one_without_is_not_verifiable(model_dir, xor_byte, capsys):
    local = model_dir.parent / "copy"
    shutil.copytree(model_dir, local)  # new inodes: every file is hashed once
    assert check(local) == model_files(local)
    with xor_byte(local / WEIGHTS, 2000, 0x02):
        with pytest.raises(ModelIntegrityError, match=f"{local} is damaged .*re-create the directory"):
            models.load(str(local))
    (local / MANIFEST).unlink()
    (local / MANIFEST).mkdir()  # a manifest that cannot be read is refused, not taken for none
    with pytest.raises(ModelIntegrityError, match=f"{local / MANIFEST} cannot be read"):
        models.load(str(local))
    (local / MANIFEST).rmdir()
    assert main(["models", "verify", str(local)]) == 2
    assert f"{local} has no {MANIFEST}: only a directory that kvlab prepared can be verified" in one_line_error(capsys)
    assert not (local / MANIFEST).exists()
