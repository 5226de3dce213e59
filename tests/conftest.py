"""Shared fixtures. Real models load once per session (they are prepared by `make test` beforehand)."""

from __future__ import annotations

import warnings

import pytest
import torch

import kvlab

warnings.filterwarnings("ignore", message=".*falling back to its reference PyTorch implementation.*")


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One torch thread for the test process. On a CPU that other jobs share (browser-test servers, notebook
    kernels, a busy CI host), a second thread made small-model generation 7-35x slower; alone it gains < 2x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of SmolLM2-135M-Instruct in float32."""
    return kvlab.load("smollm2")


@pytest.fixture(scope="session")
def gemma3():
    """(model, tokenizer) of Gemma 3 270M in float32."""
    return kvlab.load("gemma3")


@pytest.fixture(scope="session")
def tiny():
    """tiny(name) -> a cached seeded random-weight model."""
    cache: dict[str, torch.nn.Module] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = kvlab.tiny_model(name)
        return cache[name]

    return get


@pytest.fixture
def prompt_ids():
    """prompt_ids(n, seed=0) -> (1, n) random token ids for the tiny models (vocab 128, ids 3..127)."""

    def make(n: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
        return torch.randint(3, kvlab.models.tiny.TINY_VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))

    return make
