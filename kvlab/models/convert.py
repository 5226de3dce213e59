"""Convert a GGUF file once into a safetensors model directory: transformers' GGUF loader dequantizes every
tensor on every load (Gemma 3: 40 s vs 6 s from a saved directory).

The directory is written under a name that carries this process's id (`smollm2.partial-1234`) and renamed when
complete; a process killed outright leaves it for `remove_stale_partials`, which spares running processes' work.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import psutil

from kvlab import _compat, atomic
from kvlab.log import get_logger
from kvlab.measure.timing import clock, wall_clock_ns
from kvlab.models.manifest import write_manifest

log = get_logger(__name__)

MARKER = "kvlab-model.json"
PARTIAL = ".partial"
# A `NAME.partial` without a process id was left by an earlier kvlab; one untouched this long is abandoned.
LEGACY_PARTIAL_AGE_S = 3600


def is_converted(model_dir: Path) -> bool:
    return (model_dir / MARKER).exists() and (model_dir / "model.safetensors").exists()


def remove_stale_partials(directory: Path) -> list[Path]:
    """Delete temporary conversion directories whose process is gone; returns what was removed."""
    removed = []
    for path in directory.glob(f"*{PARTIAL}*"):
        suffix = path.name.rsplit(PARTIAL, 1)[1]
        if suffix.startswith("-") and suffix[1:].isdigit():
            stale = int(suffix[1:]) != os.getpid() and not psutil.pid_exists(int(suffix[1:]))  # any user's
        else:
            stale = suffix == "" and (wall_clock_ns() - path.stat().st_mtime_ns) / 1e9 > LEGACY_PARTIAL_AGE_S
        if stale:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def partial_path(final: Path) -> Path:
    """Where `final` is written until it is complete."""
    return final.with_name(f"{final.name}{PARTIAL}-{os.getpid()}")


def convert_gguf(gguf_path: Path, model_dir: Path, source: dict) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("converting %s to safetensors (once; later loads take seconds)", gguf_path.name)
    started = clock()
    partial = partial_path(model_dir)
    try:
        _step(1, "dequantizing the GGUF tensors (transformers' bar below)", started)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype="float32")
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        # The weights are already dequantized; only the marker stands in the way of saving them.
        _compat.drop_quantizer(model)
        _step(2, f"writing safetensors to {partial.name}", started)
        model.save_pretrained(partial, safe_serialization=True)
        tokenizer.save_pretrained(partial)
        seconds = round(clock() - started, 1)
        marker = {**source, "gguf": gguf_path.name, "convert_seconds": seconds}
        atomic.write_text(partial / MARKER, json.dumps(marker, indent=1))
        shutil.rmtree(model_dir, ignore_errors=True)
        partial.rename(model_dir)
    except BaseException:  # KeyboardInterrupt too: an interrupted conversion leaves no directory behind
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _step(3, "hashing the files into the manifest", started)
    write_manifest(model_dir)
    log.info("converted in %s s -> %s", seconds, model_dir)
    return model_dir


def _step(number: int, what: str, started: float) -> None:
    log.info("[%d/3 at %.0f s] %s", number, clock() - started, what)
