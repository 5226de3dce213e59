import functools

import torch
from transformers import Cache, DynamicCache

from kvlab.strategies.key_norm import KeyNormLayer, pick


def scaled(norms: list[float], heads: int = 2) -> torch.Tensor:
    """(1, heads, len(norms), 4) keys whose L2 norm is `norms` (head 1 reversed, so heads choose differently); the
    last axis's first entry is the norm, so a slot's token can be read back."""
    per_head = [norms, norms[::-1]][:heads]
    rows = torch.tensor(per_head).unsqueeze(-1)  # (heads, tokens, 1)
    return torch.cat([rows, torch.zeros(heads, len(norms), 3)], dim=-1).unsqueeze(0)


def test_each_head_keeps_its_lowest_norm_keys_in_order_and_the_recent_ones():
    norms = [5.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 6.0]
    layer = KeyNormLayer(budget=4, recent=2)
    keys = scaled(norms)
    returned, _ = layer.update(keys, keys.clone())
    assert returned.shape[-2] == 8  # this step attends to everything
    # head 0: of the 6 older slots the 2 lowest are 1.0 and 2.0 (in order), then the recent 7.0, 6.0
    assert layer.keys[0, 0, :, 0].tolist() == [1.0, 2.0, 7.0, 6.0]
    # head 1 reads the norms reversed: older 6, 7, 3, 8, 2, 9 -> lowest 3.0, 2.0 in order; recent 1.0, 5.0
    assert layer.keys[0, 1, :, 0].tolist() == [3.0, 2.0, 1.0, 5.0]
    torch.testing.assert_close(layer.values, layer.keys)  # values follow their keys
    assert layer.get_seq_length() == 8 and layer.get_mask_sizes(1) == (5, 4)


def test_under_budget_nothing_is_dropped():
    layer = KeyNormLayer(budget=6, recent=2)
    keys = scaled([3.0, 1.0, 2.0])
    layer.update(keys, keys)
    assert torch.equal(layer.keys, keys)


def test_pick_gathers_each_heads_own_slots():
    states = torch.arange(2 * 4 * 3, dtype=torch.float32).view(1, 2, 4, 3)  # (batch, heads, seq, head_dim)
    slots = torch.tensor([[[0, 3], [1, 2]]])  # (batch, heads, kept)
    assert torch.equal(pick(states, slots), torch.stack([states[0, 0, [0, 3]], states[0, 1, [1, 2]]]).unsqueeze(0))


def test_generate_holds_the_budget_and_with_room_matches_the_full_cache(tiny, greedy):
    model = tiny("tiny-llama")
    ids = torch.tensor([[5, 9, 17, 33, 2, 61, 40, 8]])
    tight = Cache(layer_class_to_replicate=functools.partial(KeyNormLayer, budget=6, recent=2))
    greedy(model, ids, tight, new_tokens=10)
    assert {layer.keys.shape[-2] for layer in tight.layers} == {6}
    assert tight.get_seq_length() == 17  # 8 + 10 tokens given, the last one generated but never fed
    roomy = Cache(layer_class_to_replicate=functools.partial(KeyNormLayer, budget=64))
    plain = greedy(model, ids, DynamicCache(config=model.config), new_tokens=10)
    assert torch.equal(greedy(model, ids, roomy, new_tokens=10), plain)
