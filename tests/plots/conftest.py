"""Traces from tiny random-weight models, shared by the plot tests (seconds to make)."""

from __future__ import annotations

import matplotlib
import pytest
import torch

import kvlab
from kvlab.models.tiny import TINY_VOCAB

matplotlib.use("Agg")


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, TINY_VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="package")
def traces():
    """name -> Trace for the cache structures the plots draw."""
    llama, gemma = kvlab.tiny_model("tiny-llama"), kvlab.tiny_model("tiny-gemma3")
    bart = kvlab.tiny_model("tiny-bart")
    return {
        "dynamic": kvlab.run(llama, None, _ids(6), "dynamic", max_new_tokens=5).trace,
        "sliding": kvlab.run(gemma, None, _ids(12), "dynamic", max_new_tokens=6).trace,
        "static": kvlab.run(llama, None, _ids(6), "static", max_cache_len=16, max_new_tokens=5).trace,
        "offloaded": kvlab.run(llama, None, _ids(6), "offloaded", max_new_tokens=4).trace,
        "offloaded_sliding": kvlab.run(gemma, None, _ids(12), "offloaded", max_new_tokens=3).trace,
        "quantized": kvlab.run(
            llama,
            None,
            _ids(40),
            "quantized",
            backend="quanto",
            nbits=4,
            q_group_size=16,
            residual_length=8,
            max_new_tokens=12,
        ).trace,
        "bart": kvlab.run(bart, None, _ids(7), "dynamic", max_new_tokens=5).trace,
    }
