"""`kvlab bench --overhead` on tiny-llama: the same JSON shape as data/bench/overhead_smollm2.json, never timings;
and `recording_cost`, the run's cache calls replayed into plain, instrumented and watched caches."""

import json
from pathlib import Path

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from kvlab.bench import BenchSettings
from kvlab.bench.overhead import (
    MIN_PAIRS,
    cache_calls,
    overhead_lines,
    recording_cost,
    recording_lines,
    run_overhead,
    strategy_recording_cost,
    whole_run_line,
    whole_run_overhead,
)

SAVED = Path(__file__).parents[2] / "data" / "bench" / "overhead_smollm2.json"


def test_the_headline_is_the_whole_run_in_pairs_then_the_replayed_breakdown(tiny, byte_tokenizer):
    settings = BenchSettings(model="tiny-llama", prompt_tokens=12, new_tokens=4, repeats=2)
    result = run_overhead(tiny("tiny-llama"), byte_tokenizer, settings, max_pairs=7)
    saved = json.loads(SAVED.read_text())
    assert list(result) == list(saved) and list(result["whole_run"]) == list(saved["whole_run"])
    whole = result["whole_run"]
    assert result["same_tokens"] is True and result["device"] == "cpu"
    assert MIN_PAIRS <= whole["pairs"] <= 7 and len(whole["plain_s"]) == len(whole["watched_s"]) == whole["pairs"]
    ratios = sorted(w / p for p, w in zip(whole["plain_s"], whole["watched_s"]))
    assert whole["ratio"] == pytest.approx(ratios[len(ratios) // 2])  # the median of the pairwise ratios (odd count)
    low, high = whole["interval"]
    assert ratios[0] <= low <= whole["ratio"] <= high <= ratios[-1]
    assert whole["resolved"] == (high - low <= 0.02) and (whole["pairs"] == 7 or whole["resolved"])
    lines = overhead_lines(result)
    assert lines[0] == whole_run_line(whole) and lines[-1] == "same tokens: True"
    assert [line.split(":")[0] for line in lines[1:3]] == ["breakdown, instrumented", "breakdown, watched"]


def test_no_pair_starts_after_max_seconds_once_the_least_pairs_ran(tiny, byte_tokenizer):
    ids = torch.tensor([[5, 6, 7, 8]])  # (1, prompt)
    whole = whole_run_overhead(tiny("tiny-llama"), byte_tokenizer, ids, 2, max_pairs=41, max_seconds=0.0)
    assert whole["pairs"] == MIN_PAIRS and len(whole["watched_s"]) == MIN_PAIRS  # the least it takes, then it stops
    if not whole["resolved"]:
        assert whole_run_line(whole).startswith("cannot resolve 1% on this machine now")


def test_the_floor_pairs_two_unwatched_runs_and_says_whether_the_pairing_is_fair(tiny, byte_tokenizer, monkeypatch):
    import kvlab.bench.overhead

    monkeypatch.setattr(kvlab.bench.overhead, "watch", lambda model: pytest.fail("the floor watches nothing"))
    ids = torch.tensor([[5, 6, 7, 8]])  # (1, prompt)
    floor = whole_run_overhead(tiny("tiny-llama"), byte_tokenizer, ids, 2, max_pairs=MIN_PAIRS, watching=False)
    assert floor["watching"] is False and floor["same_tokens"] is True and floor["pairs"] == MIN_PAIRS
    base = {"watching": False, "ratio": 1.001, "pairs": 9, "resolution": 0.01, "resolved": True}
    fair = whole_run_line(base | {"interval": [0.996, 1.004]})
    assert fair.startswith("plain / plain, the instrument's floor, whole run in lockstep: 1.0010x")
    assert fair.endswith("the pairing is fair")
    assert whole_run_line(base | {"interval": [0.992, 0.9996]}).endswith("the pairing is off: it favours one side")


def test_the_verdict_refuses_an_interval_too_wide_for_1_percent():
    base = {"watching": True, "ratio": 1.004, "pairs": 9, "resolution": 0.01}
    noisy = whole_run_line(base | {"interval": [0.97, 1.05], "resolved": False})
    assert noisy.startswith("cannot resolve 1% on this machine now: watched / plain, whole run in lockstep: 1.0040x")
    assert whole_run_line(base | {"interval": [0.998, 1.009], "resolved": True}).endswith("watching costs at most 0.9%")
    assert whole_run_line(base | {"ratio": 1.03, "interval": [1.02, 1.035], "resolved": True}).endswith(
        "watching costs more than 1%"
    )


class StrategyLayer(DynamicLayer):
    """A user's layer class that changes nothing (defined outside kvlab, as a user's is)."""


def test_overhead_with_a_strategy_adds_what_recording_it_costs(tiny, byte_tokenizer):
    settings = BenchSettings(model="tiny-llama", prompt_tokens=12, new_tokens=3, repeats=1)
    result = run_overhead(tiny("tiny-llama"), byte_tokenizer, settings, (StrategyLayer,), max_pairs=MIN_PAIRS)
    (cost,) = result["strategies"]
    assert cost["strategy"] == "StrategyLayer" and cost["updates_per_replay"] == 3 * 3  # 3 steps x 3 layers
    line = overhead_lines(result)[-2]
    assert line.startswith("watching StrategyLayer: ") and line.endswith(cost["ratio"]["verdict"])


def test_the_replay_is_the_models_own_prefill_keys_and_values(tiny, prompt_ids):
    model = tiny("tiny-llama")
    calls = cache_calls(model, prompt_ids(6))
    assert len(calls) == model.config.num_hidden_layers
    keys, values = calls[0]
    heads, dim = model.config.num_key_value_heads, model.config.hidden_size // model.config.num_attention_heads
    assert keys.shape == values.shape == (1, heads, 6, dim)  # (batch, kv_heads, prompt, head_dim)


def test_each_route_gets_an_extra_time_per_token_and_a_share_with_its_interval(tiny, prompt_ids):
    model = tiny("tiny-llama")
    plain_step_s = 0.01
    cost = recording_cost(model, prompt_ids(6), new_tokens=3, plain_step_s=plain_step_s, repeats=3)
    assert cost["replays"] == 3 and cost["plain_replay_s"] > 0
    for route in ("instrumented", "watched"):
        low, high = cost[f"{route}_share_interval"]
        assert low <= cost[f"{route}_share"] <= high
        assert cost[f"{route}_share"] == pytest.approx(cost[f"{route}_extra_ms_per_token"] / 1e3 / plain_step_s)
    lines = recording_lines(cost)
    assert [line.split(":")[0] for line in lines] == ["instrumented", "watched"]
    assert "replayed 3 times" in lines[0]
    assert not model._forward_hooks and not model._forward_pre_hooks  # the watch it replayed through is closed


def test_recording_a_strategy_is_timed_against_recording_a_dynamic_layer(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cost = strategy_recording_cost(model, prompt_ids(6), new_tokens=3, layer_class=StrategyLayer, repeats=3)
    assert cost["strategy"] == "StrategyLayer"
    assert cost["replays"] == 3 and cost["updates_per_replay"] == 3 * model.config.num_hidden_layers
    ratio = cost["ratio"]
    assert (ratio["a"]["label"], ratio["b"]["label"]) == ("dynamic", "strategy")
    assert ratio["low"] <= ratio["ratio"] <= ratio["high"] and len(ratio["b"]["times_s"]) == 3
    recorded = cost["recording_us_per_update"]["strategy"]
    assert recorded == pytest.approx(ratio["b"]["median_s"] / cost["updates_per_replay"] * 1e6)
