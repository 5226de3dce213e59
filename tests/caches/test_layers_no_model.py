"""Cache tests that need no model: hand-written tensors through the instrumented caches, as transformers'
own cache tests do. Values are token positions, so what a layer keeps can be read off directly."""

import pytest
import torch

from kvlab import make_cache
from kvlab.caches import CacheCropError

WINDOW = 4


@pytest.fixture
def config(sliding_config):
    return sliding_config  # layer 0 sliding (window 4), layer 1 full attention (tests/conftest.py)


def tokens(*positions):
    """(batch=1, kv_heads=1, seq, head_dim=1) holding the given positions."""
    return torch.tensor(positions, dtype=torch.float32).view(1, 1, -1, 1)


def feed(cache, *positions):
    out = {}
    for layer in (0, 1):
        out[layer] = cache.update(tokens(*positions), tokens(*positions), layer)
    return out


def listed(t):
    return t.flatten().tolist()


def test_static_sliding_window_of_4_turns_1234_into_2345(config):
    cache = make_cache("static", config, max_cache_len=8)
    feed(cache, 1, 2, 3, 4)
    assert listed(cache.layers[0].keys) == [1, 2, 3, 4]
    feed(cache, 5)
    assert listed(cache.layers[0].keys) == [2, 3, 4, 5]
    assert listed(cache.layers[1].keys) == [1, 2, 3, 4, 5, 0, 0, 0]
    sliding, full = cache.trace.final_layers()
    assert (sliding["layer_kind"], sliding["slots_allocated"], sliding["slots_live"], sliding["tokens_evicted"]) == (
        "sliding",
        4,
        4,
        1,
    )
    assert (full["layer_kind"], full["slots_allocated"], full["slots_live"], full["slots_masked"]) == ("full", 8, 5, 3)
    assert [e["tokens_evicted_now"] for e in cache.trace.updates if e["layer_idx"] == 0] == [0, 1]
    # bytes are the pre-allocated storage: (1 x 1 x slots x 1) float32, keys and values
    assert sliding["bytes_held"] == 2 * 4 * 4 and full["bytes_held"] == 2 * 8 * 4


def test_dynamic_sliding_layer_keeps_window_minus_one_and_counts_evictions(config):
    cache = make_cache("dynamic", config)
    out = feed(cache, 1, 2, 3, 4)
    assert listed(out[0][0]) == [1, 2, 3, 4]  # attends to all four
    assert listed(cache.layers[0].keys) == [2, 3, 4]  # keeps window - 1 for the next token
    out = feed(cache, 5)
    assert listed(out[0][0]) == [2, 3, 4, 5]
    steps = [
        (e["step"], e["layer_idx"], e["logical_length"], e["slots_live"], e["tokens_evicted_now"])
        for e in cache.trace.updates
    ]
    assert steps == [(0, 0, 4, 3, 1), (0, 1, 4, 4, 0), (1, 0, 5, 3, 1), (1, 1, 5, 5, 0)]
    # the prefill's kept window is a view into the 4-token concatenation: its storage is counted
    assert cache.trace.updates[0]["bytes_held"] == 2 * 4 * 4


def test_steps_count_forwards_and_cache_bytes_accumulate(config):
    cache = make_cache("dynamic", config)
    for pos in range(1, 4):
        feed(cache, pos)
    assert cache.trace.summary()["steps"] == 3
    # window 4 keeps up to 3 tokens: both layers hold 1, 2, 3 tokens (2 tensors x 4 bytes each)
    assert cache.trace.bytes_by_step() == [2 * 4 * 2, 2 * 4 * 4, 2 * 4 * 6]
    feed(cache, 4)
    # the sliding layer keeps 3 tokens, but as a view into the 4-token concatenation it made: storage is 4
    assert cache.trace.bytes_by_step()[-1] == 2 * 4 * (4 + 4)
    assert cache.trace.updates[-2]["slots_live"] == 3


def test_crop_is_recorded_with_lengths_before_and_after(config):
    cache = make_cache("dynamic", config)
    feed(cache, 1, 2)
    feed(cache, 3)
    cache.crop(-2)
    (crop,) = cache.trace.crops
    assert (crop["n"], crop["lengths_before"], crop["lengths_after"], crop["past_recording"]) == (
        -2,
        [3, 3],
        [1, 1],
        False,
    )
    assert listed(cache.layers[1].keys) == [1]


def test_crop_past_the_start_is_refused_before_anything_changes(config):
    cache = make_cache("dynamic", config)
    feed(cache, 1, 2, 3)
    with pytest.raises(CacheCropError, match=r"holds 3 tokens.*crop\(0\) \.\. crop\(-3\)"):
        cache.crop(-4)
    with pytest.raises(CacheCropError, match="negative count"):
        cache.crop(2)
    assert listed(cache.layers[1].keys) == [1, 2, 3] and not cache.trace.crops


def test_static_crop_after_a_sliding_layer_wrapped_is_refused(config):
    cache = make_cache("static", config, max_cache_len=8)
    feed(cache, 1, 2, 3)
    cache.crop(-1)  # not wrapped yet: fine
    assert cache.get_seq_length() == 2
    feed(cache, 3, 4, 5)  # 5 tokens seen by a window of 4
    with pytest.raises(CacheCropError, match="already evicted.*activate_past_recording"):
        cache.crop(-1)


def test_offloaded_cache_runs_on_cpu_and_logs_every_move(config):
    cache = make_cache("offloaded", config)  # DynamicCache default: offload every layer
    feed(cache, 1, 2)
    feed(cache, 3)
    moves = [(e["step"], e["layer_idx"], e["direction"]) for e in cache.trace.transfers]
    # each update prefetches the next layer (wrapping around) and offloads its own
    assert moves == [
        (0, 0, "offload"),
        (0, 0, "prefetch"),
        (0, 1, "offload"),
        (1, 1, "prefetch"),
        (1, 0, "offload"),
        (1, 0, "prefetch"),
        (1, 1, "offload"),
    ]
    assert all(e["src"] == e["dst"] == "cpu" and not e["moved"] for e in cache.trace.transfers)
    assert cache.trace.transfers[-1]["bytes"] == 2 * 3 * 4


def test_dynamic_crop_of_a_filled_window_is_refused_unless_past_recording(config):
    config.layer_types = ["full_attention", "sliding_attention"]  # transformers would crop layer 0, then raise
    cache = make_cache("dynamic", config)
    feed(cache, 1, 2, 3, 4, 5)
    with pytest.raises(CacheCropError, match="sliding layer 1 has seen 5 tokens.*activate_past_recording"):
        cache.crop(-1)
    assert cache.layers[0].get_seq_length() == 5  # nothing was cropped
    recording = make_cache("dynamic", config)
    recording.activate_past_recording()
    feed(recording, 1, 2, 3, 4, 5)
    recording.crop(-1)
    assert listed(recording.layers[1].keys) == [2, 3, 4] and recording.trace.crops[0]["past_recording"] is True
