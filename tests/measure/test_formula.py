import torch

import kvlab
from kvlab.measure import formula


def test_formula_matches_a_dynamic_cache_of_full_layers(tiny, prompt_ids):
    model = tiny("tiny-llama")  # 3 layers, 2 kv heads × 16
    assert formula.kv_bytes_per_token(model.config) == 3 * 2 * 2 * 16 * 4
    assert formula.kv_bytes_per_token(model.config, torch.bfloat16) == 3 * 2 * 2 * 16 * 2
    result = kvlab.run(model, None, prompt_ids(9), "dynamic", max_new_tokens=4)
    tokens = result.trace.final_layers()[0]["logical_length"]
    assert result.trace.summary()["final_bytes"] == formula.kv_bytes(model.config, tokens)


def test_sliding_layers_are_capped_at_the_window(tiny):
    config = tiny("tiny-gemma3").config  # window 8, 4 sliding + 2 full layers
    per_layer = formula.bytes_per_token_per_layer(config)
    assert formula.kv_bytes(config, 5) == 6 * 5 * per_layer
    assert formula.kv_bytes(config, 100) == (2 * 100 + 4 * 8) * per_layer
    assert formula.kv_bytes(config, 100, window=20) == (2 * 100 + 4 * 20) * per_layer


def test_by_layer_kind_and_curves_add_up(tiny):
    config = tiny("tiny-gemma3").config
    by_layer_kind = formula.kv_bytes_by_layer_kind(config, 20)
    assert set(by_layer_kind) == {"full", "sliding"} and sum(by_layer_kind.values()) == formula.kv_bytes(config, 20)
    curves = formula.expected_curves(config, 20, points=10)
    assert (8, formula.kv_bytes(config, 8)) in curves["total"]  # the knee at the window is always a point
    assert curves["sliding"][-1][1] == by_layer_kind["sliding"] and curves["total"][0] == (0, 0)
