"""`recording_cost`: the run's cache calls replayed into plain, instrumented and watched caches (tiny-llama)."""

import pytest
from transformers.cache_utils import DynamicLayer

from kvlab.bench.overhead import cache_calls, recording_cost, recording_lines, strategy_recording_cost


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


class Mine(DynamicLayer):
    """A user's layer class (defined outside kvlab)."""


def test_recording_a_strategy_is_timed_against_recording_a_dynamic_layer(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cost = strategy_recording_cost(model, prompt_ids(6), new_tokens=3, layer_class=Mine, repeats=3)
    assert cost["strategy"] == "Mine"
    assert cost["replays"] == 3 and cost["updates_per_replay"] == 3 * model.config.num_hidden_layers
    ratio = cost["ratio"]
    assert (ratio["a"]["label"], ratio["b"]["label"]) == ("dynamic", "strategy")
    assert ratio["low"] <= ratio["ratio"] <= ratio["high"] and len(ratio["b"]["times_s"]) == 3
    recorded = cost["recording_us_per_update"]["strategy"]
    assert recorded == pytest.approx(ratio["b"]["median_s"] / cost["updates_per_replay"] * 1e6)
