import functools

import pytest
import torch
from transformers import Cache, DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from kvlab.measure.streaming import rope_frequencies
from kvlab.strategies.sinks_window import SinkWindowLayer, rotate

HEAD_DIM = 8


def numbered(start: int, count: int) -> torch.Tensor:
    """(1, 2, count, HEAD_DIM) states whose every entry is its token's number: what a slot holds can be read back."""
    return torch.arange(start, start + count, dtype=torch.float32).view(1, 1, count, 1).expand(1, 2, count, HEAD_DIM)


def tokens_in(states: torch.Tensor) -> list[int]:
    return states[0, 0, :, 0].long().tolist()


def test_keeps_the_sinks_and_the_window_and_attends_to_everything_first():
    layer = SinkWindowLayer(sinks=2, window=3)
    assert layer.get_mask_sizes(4) == (4, 0)  # nothing held yet: the prompt attends causally to itself
    keys, values = layer.update(numbered(0, 4), numbered(0, 4))
    assert tokens_in(keys) == tokens_in(values) == [0, 1, 2, 3]
    assert tokens_in(layer.keys) == [0, 1, 2, 3]  # 4 tokens fit in 2 + 3
    for step in range(4, 9):
        kept = layer.keys.shape[-2]
        assert layer.get_mask_sizes(1) == (kept + 1, step - kept)  # all kept slots, the query at position `step`
        keys, _ = layer.update(numbered(step, 1), numbered(step, 1))
        assert keys.shape[-2] == kept + 1  # what the mask was told
        assert layer.get_seq_length() == step + 1  # generate's next position
    assert tokens_in(layer.keys) == tokens_in(layer.values) == [0, 1, 6, 7, 8]


def test_defaults_come_from_class_attributes_so_a_cache_can_build_it_with_no_argument():
    class Short(SinkWindowLayer):
        sinks, window = 1, 2

    cache = Cache(layer_class_to_replicate=Short)
    for step in range(5):
        cache.update(numbered(step, 1), numbered(step, 1), layer_idx=0)
    assert tokens_in(cache.layers[0].keys) == [0, 3, 4]
    assert cache.get_seq_length() == 5


def test_a_window_without_sinks_keeps_only_the_last_tokens():
    layer = SinkWindowLayer(sinks=0, window=2)
    layer.update(numbered(0, 5), numbered(0, 5))
    assert tokens_in(layer.keys) == [3, 4]


def test_reset_forgets_the_tokens_seen():
    layer = SinkWindowLayer(sinks=1, window=1)
    layer.update(numbered(0, 3), numbered(0, 3))
    layer.reset()
    assert layer.get_seq_length() == 0 and layer.get_mask_sizes(2) == (2, 0)


def test_rotate_moves_a_key_as_rope_at_the_later_position_would(tiny):
    """RoPE at p, then `rotate` by d, is the model's own RoPE at p + d (the identity the sinks' re-rotation uses)."""
    model = tiny("tiny-llama")
    rotary, inv_freq = model.get_decoder().rotary_emb, rope_frequencies(model)[0]
    key = torch.randn(1, 2, 1, model.config.head_dim, generator=torch.Generator().manual_seed(0))

    def at(position: int) -> torch.Tensor:
        cos, sin = rotary(key, torch.tensor([[position]]))
        return apply_rotary_pos_emb(key, key, cos, sin)[1]

    moved = rotate(at(3), 40, inv_freq)
    torch.testing.assert_close(moved, at(43), rtol=0, atol=1e-5)
    assert (at(3) - at(43)).abs().max() > 0.1  # the move is not a no-op


def test_with_frequencies_the_sinks_sit_right_before_the_window():
    """StreamingLLM's positions: after T tokens sink j is rotated to T - window - sinks + j; the window stays."""
    inv_freq = 1.0 / (100.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))  # (HEAD_DIM // 2,)
    raw = torch.randn(1, 2, 12, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    rotated = torch.cat([rotate(raw[..., i : i + 1, :], i, inv_freq) for i in range(12)], dim=-2)  # RoPE at i
    layer = SinkWindowLayer(sinks=2, window=3, inv_freq=inv_freq)
    layer.update(rotated[..., :4, :], rotated[..., :4, :])
    for step in range(4, 12):
        layer.update(rotated[..., step : step + 1, :], rotated[..., step : step + 1, :])
    sinks = torch.cat([rotate(raw[..., j : j + 1, :], 12 - 3 - 2 + j, inv_freq) for j in range(2)], dim=-2)
    torch.testing.assert_close(layer.keys[..., :2, :], sinks, rtol=0, atol=1e-5)
    torch.testing.assert_close(layer.keys[..., 2:, :], rotated[..., 9:, :])  # the window untouched
    torch.testing.assert_close(layer.values[..., :2, :], rotated[..., :2, :])  # values carry no position


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_generate_with_room_for_everything_gives_the_full_caches_tokens(tiny, greedy, name):
    model = tiny(name)
    ids = torch.tensor([[5, 9, 17, 33, 2, 61, 40, 8]])
    roomy = functools.partial(SinkWindowLayer, sinks=4, window=64)
    plain = greedy(model, ids, DynamicCache(config=model.config), new_tokens=10)
    assert torch.equal(greedy(model, ids, Cache(layer_class_to_replicate=roomy), new_tokens=10), plain)


def test_streaming_equals_the_full_model_under_a_sinks_and_window_mask(tiny):
    """With original positions, streaming through the layer is the whole text read at once with each query seeing
    the sinks and the last `window` tokens before it: the eviction is exactly that mask, nothing else."""
    model, sinks, window = tiny("tiny-llama"), 2, 5
    ids = torch.randint(3, 120, (1, 20), generator=torch.Generator().manual_seed(2))
    cache = Cache(layer_class_to_replicate=functools.partial(SinkWindowLayer, sinks=sinks, window=window))
    with torch.no_grad():
        streamed = torch.cat([model(ids[:, t : t + 1], past_key_values=cache).logits for t in range(20)], dim=1)
        q, k = torch.arange(20).view(-1, 1), torch.arange(20).view(1, -1)
        visible = (k <= q) & ((k < sinks) | (k >= q - window))  # (queries, keys)
        mask = torch.zeros(1, 1, 20, 20).masked_fill(~visible, torch.finfo(torch.float32).min)
        whole = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(streamed, whole, rtol=1e-4, atol=1e-4)
    assert cache.layers[0].keys.shape[-2] == sinks + window
