"""A prepared model's manifest: the size and digests of every file, and a record of each file as it was checked.

A converted directory used to be trusted because it existed, then because 64 sampled 4 KiB blocks of its
weights matched: one byte flipped between those blocks (a weight became -4608.0 and the greedy tokens changed)
still loaded silently. Now no byte of a file changed since its check is used unchecked:

- `write_manifest` (the end of a conversion) records every file's size, sha256 and xxh3_128 in
  `kvlab-manifest.json`, and each file's identity as it was hashed (size, mtime_ns, inode, ctime_ns) in
  `.kvlab-verified.json`, which holds the sha256 of the manifest it vouches for (another manifest voids it).
- `check` (every load) compares identities. A file whose identity is the recorded one has not been written
  since it was hashed (every write moves the ctime, even one that puts the mtime back; a replaced or copied file
  has another inode), so it is not read at all. A file whose identity differs (edited, copied, touched, restored)
  is hashed whole: a different digest is refused, naming the file; the same digest gets its new identity
  recorded, so only the first load after a change pays for the hash.
- `full_check` (`kvlab models verify`): the sha256 of every byte of every file, whatever the identities say.

Measured on this machine (2 shared cores, warm page cache, medians): with the identities unchanged, the check
takes 0.16 ms for SmolLM2 and 0.14 ms for Gemma 3 (no file is read; the load itself takes 0.2-6 s). After a
change, a full hash of SmolLM2's 542 MB takes 0.043 s with xxh3_128 (12.5 GB/s) against 0.34 s with sha256
(1.6 GB/s with the CPU's SHA instructions, 0.5 GB/s without them), and of Gemma 3's 1.1 GB 0.079 s against
0.68 s; hashlib's blake2b runs at 0.85 GB/s, blake3 at 4.1-4.8 GB/s on one thread. So the load check uses
xxh3_128 (the `xxhash` package) where the manifest has it, and sha256 otherwise (a manifest written before
xxh3_128 was recorded, or a Python without xxhash); `full_check` uses sha256, the digest anyone can recompute.
Both catch accidental damage; neither stops someone who rewrites the manifest too.

Timestamps are stamped at a coarse tick (1-10 ms on Linux, 2 s on FAT): a second write in the tick of the one
before it leaves the identity unchanged. So a file changed less than `RACY_S` before it was hashed is not
recorded (the next load hashes it again), and `write_manifest` first waits out that window (at most `RACY_S`).

A missing or unreadable manifest is refused like damage: the files are never recorded from whatever is on disk.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import time
from pathlib import Path

from kvlab import atomic
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.log import get_logger

log = get_logger(__name__)

MANIFEST = "kvlab-manifest.json"
VERIFIED = ".kvlab-verified.json"  # a dot-file: not a model file, never listed, ignored by older kvlab versions
MANIFEST_VERSION = 2  # 1 also held sampled-block fingerprints of the weights (ignored now); 2 adds xxh3_128
READABLE_VERSIONS = (1, 2)
VERIFIED_VERSION = 1
IDENTITY = ("size", "mtime_ns", "ino", "ctime_ns")
RACY_S = 2.0
BLOCK = 1 << 20
# Files that transformers may read from a model directory: one the manifest does not list is refused.
LOADABLE_SUFFIXES = (".json", ".safetensors", ".jinja", ".model", ".txt", ".bin", ".py", ".pt", ".pth")


class ModelIntegrityError(KvlabUserError, RuntimeError):
    """A prepared model whose files are not the ones its manifest recorded (damaged, truncated, edited), or
    whose manifest is missing or unreadable."""


def _header(f, size: int, name: str) -> tuple[bytes, dict]:
    """The raw header (8-byte length + JSON) of an open safetensors file, and its parsed JSON."""
    raw_len = f.read(8)
    if len(raw_len) < 8:
        raise ModelIntegrityError(
            _("{name} is {size} bytes: too short to be a safetensors file").format(name=name, size=size)
        )
    (header_len,) = struct.unpack("<Q", raw_len)
    if header_len > size - 8:
        raise ModelIntegrityError(
            _("{name}: its header claims {claimed} bytes but the file has {size}").format(
                name=name, claimed=header_len, size=size
            )
        )
    raw = f.read(header_len)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelIntegrityError(_("{name}: its safetensors header is not valid JSON").format(name=name)) from None
    if not isinstance(header, dict):
        raise ModelIntegrityError(_("{name}: its safetensors header is not a JSON object").format(name=name))
    return raw_len + raw, header


def check_safetensors_layout(path: Path) -> None:
    """The header parses and its tensors tile the data region exactly (what a truncated or padded file breaks).

    Checked before a conversion's files are recorded, so that a broken file is never blessed by a manifest."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw, header = _header(f, size, path.name)
    spans = []
    for tensor, info in header.items():
        if tensor == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise ModelIntegrityError(
                _("{name}: tensor {tensor!r} has no valid data_offsets in its header").format(
                    name=path.name, tensor=tensor
                )
            )
        spans.append(tuple(offsets))
    data = size - len(raw)
    position = 0
    for start, end in sorted(spans):
        if start != position or end < start:
            raise ModelIntegrityError(
                _(
                    "{name}: its tensors do not tile the data region (gap or overlap at byte {start}); "
                    "the file is damaged"
                ).format(name=path.name, start=start)
            )
        position = end
    if position != data:
        raise ModelIntegrityError(
            _(
                "{name}: its header describes {described} bytes of tensors but the file holds {held}; "
                "the file is truncated or padded"
            ).format(name=path.name, described=position, held=data)
        )


@functools.cache
def _xxhash():
    """The xxhash module, or None in an environment installed before kvlab depended on it (sha256 then)."""
    try:
        import xxhash
    except ImportError:
        return None
    return xxhash


def _hasher(kind: str):
    return hashlib.sha256() if kind == "sha256" else _xxhash().xxh3_128()


def digests(path: Path, kinds: tuple[str, ...]) -> dict[str, str]:
    """The digests `kinds` ("sha256", "xxh3_128") of a file, in one read."""
    hashers = [_hasher(kind) for kind in kinds]
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(BLOCK)
        view = memoryview(buffer)
        while read := f.readinto(buffer):
            for hasher in hashers:
                hasher.update(view[:read])
    return {kind: hasher.hexdigest() for kind, hasher in zip(kinds, hashers)}


def identity(path: Path) -> dict:
    """What changes whenever a file is written or replaced: size, mtime_ns, inode, ctime_ns."""
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ino": stat.st_ino, "ctime_ns": stat.st_ctime_ns}


def _settled(found: dict, hashed_at_ns: int) -> bool:
    """Whether a file's last change is older than the timestamp tick (see the module docstring)."""
    return max(found["mtime_ns"], found["ctime_ns"]) < hashed_at_ns - int(RACY_S * 1e9)


def _listed_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.iterdir() if p.is_file() and p.name != MANIFEST and not p.name.startswith("."))


def _wait_until_settled(paths: list[Path]) -> None:
    newest = max((max(found["mtime_ns"], found["ctime_ns"]) for found in map(identity, paths)), default=0)
    wait = (newest + int(RACY_S * 1e9) - time.time_ns()) / 1e9 + 0.01
    if wait > 0:
        time.sleep(min(wait, RACY_S + 0.01))


def write_manifest(model_dir: Path) -> dict:
    """Record every file of a finished model directory, and each file's identity as it was hashed (both written
    atomically: a reader sees the old file or the new one)."""
    model_dir = Path(model_dir)
    paths = _listed_files(model_dir)
    _wait_until_settled(paths)
    kinds = ("sha256", "xxh3_128") if _xxhash() is not None else ("sha256",)
    files, identities = {}, {}
    for path in paths:
        if path.suffix == ".safetensors":
            check_safetensors_layout(path)
        files[path.name], identities[path.name] = _hashed(path, kinds)
    text = json.dumps({"kvlab_manifest": MANIFEST_VERSION, "files": files}, indent=1, sort_keys=True)
    atomic.write_text(model_dir / MANIFEST, text)
    _record(model_dir, text, identities)
    return json.loads(text)


def _hashed(path: Path, kinds: tuple[str, ...]) -> tuple[dict, dict | None]:
    """(size and digests, the identity to record or None) of one file; refused if it changes while it is read."""
    hashed_at = time.time_ns()
    before = identity(path)
    entry = {"size": before["size"], **digests(path, kinds)}
    if identity(path) != before:
        raise ModelIntegrityError(
            _("{path} changed while it was being hashed; nothing is trusted, try again").format(path=path)
        )
    return entry, before if _settled(before, hashed_at) else None


def has_manifest(model_dir: Path) -> bool:
    """Whether a directory claims to be prepared by kvlab (even with a manifest that cannot be read: then refused)."""
    return (Path(model_dir) / MANIFEST).exists()


def _read(model_dir: Path) -> tuple[str, dict]:
    """The manifest's text and content; ModelIntegrityError when it is missing, unreadable or not a manifest."""
    path = model_dir / MANIFEST
    if not path.exists():
        raise ModelIntegrityError(_("{path} is missing, so the files beside it cannot be trusted").format(path=path))
    try:
        text = path.read_text(encoding="utf-8")
        manifest = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelIntegrityError(
            _("{path} cannot be read ({error})").format(path=path, error=type(err).__name__)
        ) from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if (
        not isinstance(manifest, dict)
        or manifest.get("kvlab_manifest") not in READABLE_VERSIONS
        or not isinstance(files, dict)
        or not all(
            isinstance(e, dict)
            and type(e.get("size")) is int
            and isinstance(e.get("sha256"), str)
            and isinstance(e.get("xxh3_128", ""), str)
            for e in files.values()
        )
    ):
        versions = ", ".join(map(str, READABLE_VERSIONS))
        raise ModelIntegrityError(
            _("{path} is not a kvlab manifest (versions {versions})").format(path=path, versions=versions)
        )
    return text, manifest


def read_manifest(model_dir: Path) -> dict:
    return _read(Path(model_dir))[1]


def _verified(model_dir: Path, manifest_text: str) -> dict:
    """The identities recorded for this exact manifest; {} when there are none or they cannot be read (every
    file is then hashed: a damaged record costs time, never trust)."""
    try:
        record = json.loads((model_dir / VERIFIED).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if (
        not isinstance(record, dict)
        or record.get("kvlab_verified") != VERIFIED_VERSION
        or record.get("manifest_sha256") != hashlib.sha256(manifest_text.encode("utf-8")).hexdigest()
        or not isinstance(record.get("files"), dict)
    ):
        return {}
    return {name: found for name, found in record["files"].items() if isinstance(found, dict)}


def _record(model_dir: Path, manifest_text: str, identities: dict) -> bool:
    """Write the identities of the files just checked; False (with a note) where the directory is read-only."""
    record = {
        "kvlab_verified": VERIFIED_VERSION,
        "manifest_sha256": hashlib.sha256(manifest_text.encode("utf-8")).hexdigest(),
        "files": {name: found for name, found in sorted(identities.items()) if found is not None},
    }
    try:
        atomic.write_text(model_dir / VERIFIED, json.dumps(record, indent=1))
    except OSError as err:
        log.warning(
            "%s",
            _(
                "{directory}: its changed files match the manifest but that cannot be recorded ({error}); "
                "they will be hashed again on the next load"
            ).format(directory=model_dir, error=err),
        )
        return False
    return True


def _compare(model_dir: Path, full: bool) -> list[str]:
    """Raise ModelIntegrityError naming the first file that differs from the manifest; return the files hashed."""
    text, manifest = _read(model_dir)
    files = manifest["files"]
    present = {p.name for p in _listed_files(model_dir)}
    for name in sorted(present - set(files)):
        if name.endswith(LOADABLE_SUFFIXES):
            raise ModelIntegrityError(
                _("{path} is not in the manifest (a file transformers would read)").format(path=model_dir / name)
            )
    known = {} if full else _verified(model_dir, text)
    identities, hashed = {}, []
    for name, entry in sorted(files.items()):
        path = model_dir / name
        if name not in present:
            raise ModelIntegrityError(_("{path} is missing").format(path=path))
        found = identity(path)
        if found["size"] != entry["size"]:
            raise ModelIntegrityError(
                _("{path} is {size} bytes, the manifest says {expected}").format(
                    path=path, size=found["size"], expected=entry["size"]
                )
            )
        if known.get(name) == found:
            identities[name] = found
            continue
        kind = "xxh3_128" if not full and "xxh3_128" in entry and _xxhash() is not None else "sha256"
        digest, identities[name] = _hashed(path, (kind,))
        if digest[kind] != entry[kind]:
            raise ModelIntegrityError(
                _("{path} has changed since it was checked: its {kind} is not the manifest's").format(
                    path=path, kind=kind
                )
            )
        hashed.append(name)
    if hashed:
        _record(model_dir, text, identities)
    return hashed


def check(model_dir: Path) -> list[str]:
    """Every load: sizes and identities, and a full hash of each file whose identity changed; returns those."""
    return _compare(Path(model_dir), full=False)


def full_check(model_dir: Path) -> list[str]:
    """Every byte of every file against the manifest's sha256 (then each file's identity is recorded anew)."""
    return _compare(Path(model_dir), full=True)
