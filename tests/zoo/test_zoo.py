"""The architecture zoo: any model transformers can build generates under `kvlab.watch` with the same tokens, a
trace that counts every byte its cache holds, and a `kvlab size` that predicts those bytes from the config.

The suite runs one model per layer kind and cache family; `make test-zoo` (marker `zoo`, a CI step of its own)
runs every model type of the installed transformers and writes test-artifacts/zoo.json.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvlab.models.tiny import causal_lm_types
from tests.zoo.zoo import (
    CHECKED,
    CRASHED,
    GENERATE_FAILED,
    TIMED_OUT,
    check_type,
    kvlab_failures,
    report,
    run_zoo,
    write_summary,
)

# One model type per layer kind and cache family: (id, model_type)
REPRESENTATIVE = [
    ("full-llama", "llama"),
    ("sliding-gemma3", "gemma3_text"),
    ("chunked-llama4", "llama4_text"),
    ("mla-deepseek_v3", "deepseek_v3"),
    ("mqa-gpt_bigcode", "gpt_bigcode"),
    ("compressed-deepseek_v4", "deepseek_v4"),
    ("linear_hybrid-qwen3_next", "qwen3_next"),
    ("state_beside_layers-minimax", "minimax"),  # MiniMaxCache.linear_cache: a list beside `layers`
    ("ssm-mamba", "mamba"),
    ("ssm_attention-zamba", "zamba"),
    ("encoder_decoder-t5", "t5"),
]
ZOO_JOBS = 2
SUMMARY = Path("test-artifacts") / "zoo.json"


@pytest.mark.parametrize("model_type", [t for _, t in REPRESENTATIVE], ids=[i for i, _ in REPRESENTATIVE])
def test_watched_run_matches_plain_and_counts_every_byte(model_type):
    result = check_type(model_type)
    assert result["status"] == CHECKED, result
    assert result["caches"]["dynamic"]["status"] == CHECKED, result
    for cache, checked in result["caches"].items():
        if checked["status"] == GENERATE_FAILED:  # transformers' own limit (deepseek_v4 has no static cache)
            continue
        assert checked["status"] == CHECKED, (cache, checked)
        assert checked["tokens_identical"], (cache, checked.get("tokens"))
        assert checked["bytes_exact"], (cache, checked["bytes_differ"])
        assert checked["live_bytes"] > 0
        assert checked["size_exact"], (cache, checked.get("size_differ") or checked.get("size_error"))


@pytest.mark.zoo
def test_every_model_type_transformers_can_build(capsys):
    started = time.perf_counter()
    with capsys.disabled():
        results = run_zoo(causal_lm_types(), jobs=ZOO_JOBS, progress=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - started
    write_summary(results, SUMMARY, seconds)
    text = report(results, seconds)
    with capsys.disabled():
        print(f"\n{text}\n(every result: {SUMMARY})")
    assert not kvlab_failures(results), text
    assert not [r["model_type"] for r in results if r["status"] in (TIMED_OUT, CRASHED)], text
