"""A byte-level stand-in tokenizer for the tiny models (vocab 128) and one tiny bench run shared by the tests."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import kvlab
from kvlab.bench import BenchConfig, BenchSettings, run_bench


class ByteTokenizer:
    """Text -> one id per UTF-8 byte, folded into the tiny vocabulary (ids 3..127)."""

    pad_token_id = 0

    def __call__(self, text, return_tensors="pt", add_special_tokens=False):
        ids = [3 + b % 125 for b in text.encode()]
        return SimpleNamespace(input_ids=torch.tensor([ids]))

    def decode(self, ids, skip_special_tokens=True) -> str:
        return ""


@pytest.fixture(scope="session")
def byte_tokenizer():
    return ByteTokenizer()


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
