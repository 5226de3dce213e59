"""One tiny bench run shared by the tests (the byte tokenizer comes from tests/conftest.py), and the loader of the
top-level bench scripts they test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import kvlab
from kvlab.bench import BenchConfig, BenchSettings, run_bench

TINY_CONFIGS = [
    BenchConfig("none", "none"),
    BenchConfig("dynamic", "dynamic"),
    BenchConfig("dynamic (plain transformers)", "dynamic", plain=True),
    BenchConfig("static", "static", {"max_cache_len": 24}),
    BenchConfig("quantized quanto int4", "quantized", {"backend": "quanto", "nbits": 4, "q_group_size": 16}),
    BenchConfig("offloaded (plain transformers)", "offloaded", plain=True),
    BenchConfig("static + torch.compile", "static", {"max_cache_len": 24}, compile=True),
]
TINY_SETTINGS = BenchSettings(model="tiny-llama", prompt_tokens=12, new_tokens=4, repeats=2, quality_windows=1)


@pytest.fixture(scope="session")
def tiny_bench(byte_tokenizer):
    """run_bench on tiny-llama: (settings, result)."""
    model = kvlab.tiny_model("tiny-llama")
    return TINY_SETTINGS, run_bench(model, byte_tokenizer, TINY_SETTINGS, TINY_CONFIGS, progress=False)


BENCH_SCRIPTS = Path(__file__).resolve().parents[2] / "bench"


def bench_script(name: str) -> ModuleType:
    """bench/NAME.py as a module, registered under NAME (a spawned process, or a sibling script, imports it by it)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
