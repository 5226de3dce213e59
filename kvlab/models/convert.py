"""Convert a GGUF file once into a safetensors model directory.

transformers' GGUF loader dequantizes every tensor on every load (SmolLM2: 16 s from GGUF vs 3.6 s from a
saved directory; Gemma 3: 40 s vs 6 s). The weights it produces are plain tensors, but the model keeps a GGUF
quantizer marker that makes `save_pretrained` refuse ("The model is quantized with gguf and is not
serializable"); the marker is dropped before saving. The directory is written under a temporary name and
renamed when complete, so an interrupted conversion is never mistaken for a finished one.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import torch

MARKER = "kvlab-model.json"


def is_converted(model_dir: Path) -> bool:
    return (model_dir / MARKER).exists() and (model_dir / "model.safetensors").exists()


def convert_gguf(gguf_path: Path, model_dir: Path, source: dict) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"kvlab: converting {gguf_path.name} to safetensors (once; later loads take seconds)", file=sys.stderr)
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # The weights are already dequantized; only the marker stands in the way of saving them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = model_dir.with_name(model_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    seconds = round(time.perf_counter() - started, 1)
    (partial / MARKER).write_text(json.dumps({**source, "gguf": gguf_path.name, "convert_seconds": seconds}, indent=1))
    shutil.rmtree(model_dir, ignore_errors=True)
    partial.rename(model_dir)
    print(f"kvlab: converted in {seconds} s -> {model_dir}", file=sys.stderr)
    return model_dir
