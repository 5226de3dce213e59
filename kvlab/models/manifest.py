"""A prepared model is never used with a file that changed since it was checked, yet an unchanged one loads
without its gigabyte being read again.

`kvlab-manifest.json` holds every file's size and sha256; `.kvlab-verified.json` each file's identity as it was
hashed (size, mtime_ns, inode, ctime_ns; every write moves the ctime, a replaced file has another inode), for the
manifest whose sha256 it names. `check` (every load) hashes only a file whose identity changed; `full_check` every
byte. Timestamps have a coarse tick (up to 2 s on FAT), so a file changed less than `RACY_S` before it was hashed
is not recorded. A missing or unreadable manifest is refused like damage.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path

from kvlab import atomic
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.log import get_logger
from kvlab.measure.timing import wall_clock_ns

log = get_logger(__name__)

MANIFEST = "kvlab-manifest.json"
VERIFIED = ".kvlab-verified.json"  # a dot-file: not a model file, never listed, ignored by older kvlab versions
MANIFEST_VERSION = 2
READABLE_VERSIONS = (1, 2)  # each records every file's size and sha256 (what else an older one holds is ignored)
VERIFIED_VERSION = 1
RACY_S = 2.0
# Files that transformers may read from a model directory: one the manifest does not list is refused.
LOADABLE_SUFFIXES = (".json", ".safetensors", ".jinja", ".model", ".txt", ".bin", ".py", ".pt", ".pth")


class ModelIntegrityError(KvlabUserError, RuntimeError):
    """A prepared model whose files are not the ones its manifest recorded (damaged, truncated, edited), or
    whose manifest is missing or unreadable."""


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity(path: Path) -> dict:
    """What changes whenever a file is written or replaced: size, mtime_ns, inode, ctime_ns."""
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ino": stat.st_ino, "ctime_ns": stat.st_ctime_ns}


def _changed_ns(found: dict) -> int:
    return max(found["mtime_ns"], found["ctime_ns"])


def _listed_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.iterdir() if p.is_file() and p.name != MANIFEST and not p.name.startswith("."))


def _check_safetensors(path: Path) -> None:
    """The header parses and its tensors cover the file exactly: a broken file is never blessed by a manifest."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, "np"):
            pass
    except SafetensorError as err:
        raise ModelIntegrityError(
            _("{name} is not a sound safetensors file ({error})").format(name=path.name, error=err)
        ) from None


def write_manifest(model_dir: Path) -> dict:
    """Record every file of a finished model directory, and each file's identity as it was hashed."""
    model_dir = Path(model_dir)
    paths = _listed_files(model_dir)
    newest = max((_changed_ns(identity(path)) for path in paths), default=0)
    time.sleep(min(max((newest - wall_clock_ns()) / 1e9 + RACY_S + 0.01, 0), RACY_S + 0.01))
    files, identities = {}, {}
    for path in paths:
        if path.suffix == ".safetensors":
            _check_safetensors(path)
        digest, identities[path.name] = _hashed(path)
        files[path.name] = {"size": path.stat().st_size, "sha256": digest}
    text = json.dumps({"kvlab_manifest": MANIFEST_VERSION, "files": files}, indent=1, sort_keys=True)
    atomic.write_text(model_dir / MANIFEST, text)
    _record(model_dir, text, identities)
    return json.loads(text)


def _hashed(path: Path) -> tuple[str, dict | None]:
    """(sha256, the identity to record or None within the tick); refused if the file changes while it is read."""
    hashed_at = wall_clock_ns()
    before = identity(path)
    digest = sha256_of(path)
    if identity(path) != before:
        raise ModelIntegrityError(
            _("{path} changed while it was being hashed; nothing is trusted, try again").format(path=path)
        )
    return digest, before if _changed_ns(before) < hashed_at - int(RACY_S * 1e9) else None


def has_manifest(model_dir: Path) -> bool:
    """Whether a directory claims to be prepared by kvlab (even with a manifest that cannot be read: then refused)."""
    return (Path(model_dir) / MANIFEST).exists()


def _read(model_dir: Path) -> tuple[str, dict]:
    """The manifest's text and its files; ModelIntegrityError when it is missing, unreadable or not a manifest."""
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
        not isinstance(files, dict)
        or manifest.get("kvlab_manifest") not in READABLE_VERSIONS
        or not all(
            isinstance(e, dict) and type(e.get("size")) is int and isinstance(e.get("sha256"), str)
            for e in files.values()
        )
    ):
        versions = ", ".join(map(str, READABLE_VERSIONS))
        raise ModelIntegrityError(
            _("{path} is not a kvlab manifest (versions {versions})").format(path=path, versions=versions)
        )
    return text, files


def _verified(model_dir: Path, manifest_text: str) -> dict:
    """The identities recorded for this exact manifest; {} when there are none or they cannot be read."""
    try:
        record = json.loads((model_dir / VERIFIED).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if (
        not isinstance(record, dict)
        or record.get("kvlab_verified") != VERIFIED_VERSION
        or record.get("manifest_sha256") != _text_sha256(manifest_text)
        or not isinstance(record.get("files"), dict)
    ):
        return {}
    return {name: found for name, found in record["files"].items() if isinstance(found, dict)}


def _record(model_dir: Path, manifest_text: str, identities: dict) -> None:
    """Write the identities of the files just checked; a note where the directory is read-only."""
    record = {
        "kvlab_verified": VERIFIED_VERSION,
        "manifest_sha256": _text_sha256(manifest_text),
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


def check(model_dir: Path, full: bool = False) -> list[str]:
    """Every load: sizes and identities, and a full hash of each file whose identity changed (`full`: of every file,
    then each identity is recorded anew). Raises ModelIntegrityError naming the first file that differs from the
    manifest; returns the files hashed."""
    model_dir = Path(model_dir)
    text, files = _read(model_dir)
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
        digest, identities[name] = _hashed(path)
        if digest != entry["sha256"]:
            raise ModelIntegrityError(
                _("{path} has changed since it was checked: its {kind} is not the manifest's").format(
                    path=path, kind="sha256"
                )
            )
        hashed.append(name)
    if hashed:
        _record(model_dir, text, identities)
    return hashed


full_check = functools.partial(check, full=True)  # every byte of every file against the manifest's sha256
