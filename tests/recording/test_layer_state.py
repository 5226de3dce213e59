"""`kvlab.recording.layer_state.read_layer`: what one of transformers' own layer objects holds, read without
changing it. Hand-made keys and values (batch 1, 2 KV heads, head dim 16, float32: 128 bytes per token for keys
and values together) for the attention layers; tiny models' caches for the quantized and linear-attention ones."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, QuantizedCache
from transformers import cache_utils as cu

from kvlab import _compat
from kvlab.model_facts import model_facts
from kvlab.recording import layer_state
from kvlab.recording.layer_state import STATE_FIELDS, LayerState, read_layer
from kvlab.recording.storage import held_bytes, storage_bytes

TOKEN_BYTES = 2 * 2 * 16 * 4  # keys and values x kv_heads x head_dim x float32


def kv(tokens: int) -> torch.Tensor:
    """(batch=1, kv_heads=2, tokens, head_dim=16)."""
    return torch.ones(1, 2, tokens, 16)


def fields(state: LayerState) -> tuple:
    return (state.logical_length, state.slots_allocated, state.slots_live, state.slots_masked, state.tokens_evicted)


def test_an_empty_layer_holds_nothing_on_no_device():
    for layer in (cu.DynamicLayer(), cu.StaticLayer(max_cache_len=8)):
        state = read_layer(layer, "full")
        assert fields(state) == (0, 0, 0, 0, 0) and state.bytes_held == 0 and state.device == "none"


@pytest.mark.skipif(not hasattr(cu, "DummyLayer"), reason="transformers ships DummyLayer from 5.23")
def test_a_dummy_layer_holds_nothing_and_is_dummy_whatever_it_is_called():
    state = read_layer(cu.DummyLayer(), "full")
    assert fields(state) == (0, 0, 0, 0, 0) and state.bytes_held == 0 and state.device == "none"
    assert state.layer_kind == "dummy"


def test_a_dynamic_layer_holds_what_it_was_given():
    layer = cu.DynamicLayer()
    layer.update(kv(5), kv(5))
    state = read_layer(layer, "full")
    assert fields(state) == (5, 5, 5, 0, 0) and state.bytes_held == 5 * TOKEN_BYTES and state.device == "cpu"


def test_a_dynamic_sliding_layer_counts_what_it_dropped_and_the_storage_its_view_keeps():
    layer = cu.DynamicSlidingWindowLayer(sliding_window=4)
    layer.update(kv(6), kv(6))
    state = read_layer(layer, "sliding")
    assert fields(state) == (6, 3, 3, 0, 3)  # keeps window - 1 for the next token, has seen 6
    assert state.bytes_held == 6 * TOKEN_BYTES  # the 3 kept are a view into the 6-token tensors
    layer.update(kv(1), kv(1))
    assert fields(read_layer(layer, "sliding")) == (7, 3, 3, 0, 4)
    assert read_layer(layer, "sliding").bytes_held == 4 * TOKEN_BYTES  # now a view into 3 + 1 concatenated


def test_a_static_layer_allocates_up_front_and_masks_what_is_empty():
    layer = cu.StaticLayer(max_cache_len=8)
    layer.update(kv(3), kv(3), {"cache_position": torch.arange(3)})
    state = read_layer(layer, "full")
    assert fields(state) == (3, 8, 3, 5, 0) and state.bytes_held == 8 * TOKEN_BYTES


def test_a_static_sliding_layer_wraps_at_its_window():
    layer = cu.StaticSlidingWindowLayer(max_cache_len=8, sliding_window=4)
    layer.update(kv(6), kv(6), {"cache_position": torch.arange(6)})
    state = read_layer(layer, "chunked")  # the kind is the config's: chunked and sliding are cached alike
    assert state.layer_kind == "chunked" and fields(state) == (6, 4, 4, 0, 2) and state.bytes_held == 4 * TOKEN_BYTES


def test_a_quantized_layer_splits_its_bytes_into_packed_and_residual(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = QuantizedCache("hqq", model.config, nbits=4, q_group_size=16, residual_length=4)
    with torch.inference_mode():
        out = model(prompt_ids(10), **{_compat.CACHE_KWARG: cache})
        model(
            out.logits[:, -1:].argmax(-1), **{_compat.CACHE_KWARG: cache}
        )  # one decoded token, kept in full precision
    state = read_layer(cache.layers[0], "full")
    assert (state.logical_length, state.quantized_tokens, state.residual_tokens) == (11, 10, 1)  # prefill packed
    assert state.residual_bytes == TOKEN_BYTES and 0 < state.packed_bytes < 10 * TOKEN_BYTES
    assert state.bytes_held == state.packed_bytes + state.residual_bytes == held_bytes(cache.layers[0])
    assert fields(state)[1:] == (11, 11, 0, 0)  # a quantized layer attends to every token it holds


def test_a_linear_layer_holds_its_states_and_no_slots(tiny, prompt_ids):
    model = tiny("tiny-mamba")
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(prompt_ids(6), **{_compat.cache_kwarg(model): cache})
    state = read_layer(cache.layers[0], "linear")
    channels, conv_kernel, state_size = model_facts(model.config).linear_state
    assert state.layer_kind == "linear" and fields(state) == (0, 0, 0, 0, 0)
    assert state.bytes_held == channels * (conv_kernel + state_size) * 4  # conv + SSM state, batch 1, float32
    assert state.bytes_held == held_bytes(cache.layers[0])


def test_a_state_as_a_dict_is_a_copy():
    layer = cu.DynamicLayer()
    layer.update(kv(2), kv(2))
    state = read_layer(layer, "full")
    row = state.as_dict()
    row["bytes_held"] = 0
    assert state.bytes_held == 2 * TOKEN_BYTES and set(row) == set(STATE_FIELDS)


PLAIN_LAYERS = [  # transformers' plain attention layers, filled, with the kind their config gives them
    pytest.param(lambda: cu.DynamicLayer(), {}, id="dynamic"),
    pytest.param(lambda: cu.DynamicSlidingWindowLayer(sliding_window=4), {}, id="dynamic-sliding"),
    pytest.param(lambda: cu.StaticLayer(max_cache_len=8), {"cache_position": torch.arange(6)}, id="static"),
    pytest.param(
        lambda: cu.StaticSlidingWindowLayer(max_cache_len=8, sliding_window=4),
        {"cache_position": torch.arange(6)},
        id="static-sliding",
    ),
]


@pytest.mark.parametrize("make, kwargs", PLAIN_LAYERS)
def test_a_plain_layer_s_fields_are_all_it_keeps_and_it_stays_on_its_field_reader(make, kwargs):
    layer = make()
    layer.update(kv(6), kv(6), *([kwargs] if kwargs else []))
    state = read_layer(layer, "full")
    assert state.bytes_held == held_bytes(layer) > 0  # what the walk of its attributes finds, counters aside
    assert layer_state._READERS[type(layer)] is layer_state._known_classes()[type(layer)][0]  # the fast path
    assert layer_state.reads_every_change(layer)


class IndexedCompressedLayer(cu.DynamicLayer):
    """A layer class kvlab has never seen, as a model's own cache layer keeps its state: a plain layer's keys and
    values, indexer keys beside them, and a dict of compressed buffers (tuples and lists of tensors)."""

    __module__ = "transformers.models.example.modeling_example"  # a modeling file's own class

    def __init__(self):
        super().__init__()
        self.indexer_keys: torch.Tensor | None = None
        self.compressed = {"compressor": None, "indexer": None}

    def compress(self, tokens: int) -> None:
        self.indexer_keys = torch.ones(1, tokens, 8)  # (batch, tokens, index_head_dim)
        self.compressed["compressor"] = torch.ones(1, tokens // 2, 16)  # (batch, entries, head_dim)
        self.compressed["indexer"] = (torch.ones(1, tokens // 2, 8), [torch.ones(3, dtype=torch.float16)])


def test_a_dynamic_layer_subclass_kvlab_has_never_seen_is_counted_to_the_byte_with_its_slots(capsys):
    layer = IndexedCompressedLayer()
    empty = read_layer(layer, "full")  # keeps no tensor yet: no slots at all, which is right for any class
    assert fields(empty) == (0, 0, 0, 0, 0) and empty.bytes_held == 0 and empty.device == "none"
    layer.update(kv(6), kv(6))
    layer.compress(6)
    state = read_layer(layer, "full")
    everything = storage_bytes(layer.keys, layer.values, layer.indexer_keys, layer.compressed)
    assert state.bytes_held == everything == 6 * TOKEN_BYTES + 6 * 8 * 4 + 3 * 16 * 4 + 3 * 8 * 4 + 3 * 2
    assert fields(state) == (6, 6, 6, 0, 0)  # its keys' slots; met filled, its own count of tokens seen
    assert state.layer_kind == "full" and state.device == "cpu"
    assert not layer_state.reads_every_change(layer)  # `kvlab.watch` reads it again after each forward
    assert "no slot reading" not in capsys.readouterr().err


class OwnLayer(cu.CacheLayerMixin):
    """A layer class that is neither a dynamic nor a static one: kvlab cannot tell what its tensors mean."""

    def lazy_initialization(self, key_states, value_states):
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        self.lazy_initialization(key_states, value_states)
        self.chunks = [key_states, value_states]
        return key_states, value_states

    def get_mask_sizes(self, query_length):
        return query_length, 0

    def get_seq_length(self):
        return 0

    def get_max_length(self):
        return -1


def test_a_layer_class_kvlab_cannot_read_slots_of_is_counted_to_the_byte_with_no_slots(capsys):
    layer = OwnLayer()
    layer.update(kv(6), kv(6))
    state = read_layer(layer, "full")
    assert state.bytes_held == 6 * TOKEN_BYTES and state.device == "cpu"
    assert fields(state) == (None, None, None, None, None)  # not read, never a made-up zero
    read_layer(layer, "full")
    lines = [line for line in capsys.readouterr().err.splitlines() if "OwnLayer" in line]
    assert lines == ["kvlab: kvlab has no slot reading for OwnLayer: its bytes are counted, its slots are not."]


class Kept(cu.DynamicLayer):
    """A strategy: keeps the last 4 tokens, and lets the next query attend to the last 3 of them."""

    def update(self, key_states, value_states, *args, **kwargs):
        super().update(key_states, value_states)
        self.keys, self.values = self.keys[..., -4:, :], self.values[..., -4:, :]
        return self.keys, self.values

    def get_mask_sizes(self, query_length):
        return min(self.keys.shape[-2], 3) + query_length, 0


class Failing(Kept):
    def get_mask_sizes(self, query_length):
        raise RuntimeError("not written yet")


class StaticKept(cu.StaticLayer):
    """A strategy on a static layer: its storage is allocated up front."""


def test_a_strategy_is_read_from_what_it_holds_and_the_tokens_counted_into_it():
    layer = Kept()
    for tokens in (6, 1, 1):
        layer.update(kv(tokens), kv(tokens))
        layer_state.count_tokens(layer, tokens)  # what kvlab's caches do on each update
    state = read_layer(layer, "full")
    assert fields(state) == (8, 4, 3, 1, 4)  # seen 8, stored 4, live 3 (1 masked), 4 evicted
    assert layer_state.reads_every_change(layer)  # a user's: what it keeps changes in the updates kvlab records
    assert state.bytes_held == storage_bytes(layer.keys, layer.values) == 5 * TOKEN_BYTES  # its views keep 5
    layer_state.count_tokens(layer, -2)  # a crop(-2)
    assert read_layer(layer, "full").logical_length == 6
    layer_state.forget_tokens(layer)
    assert "_kvlab_tokens_seen" not in vars(layer)
    assert read_layer(layer, "full").logical_length == 4  # met again filled: its own count (get_seq_length)
    layer.reset()
    assert fields(read_layer(layer, "full")) == (0, 0, 0, 0, 0) and "_kvlab_tokens_seen" not in vars(layer)


def test_a_strategy_whose_own_method_fails_is_read_from_its_tensors():
    layer = Failing()
    layer.update(kv(6), kv(6))
    assert fields(read_layer(layer, "full")) == (4, 4, 4, 0, 0)  # its mask sizes raise: every stored slot is live


def test_a_static_strategy_is_allocated_up_front():
    layer = StaticKept(max_cache_len=8)
    layer.update(kv(3), kv(3), {"cache_position": torch.arange(3)})
    layer_state.count_tokens(layer, 3)
    state = read_layer(layer, "full")
    assert fields(state) == (3, 8, 3, 5, 0) and state.bytes_held == 8 * TOKEN_BYTES


@pytest.mark.skipif(not hasattr(cu, "DynamicIndexedLayer"), reason="transformers ships DynamicIndexedLayer from 5.24")
def test_an_indexed_layer_keeps_its_slots_and_counts_its_indexer_keys(capsys):
    layer = cu.DynamicIndexedLayer()
    layer.update(kv(5), kv(5))
    layer.update_indexer(torch.ones(1, 5, 8))  # (batch, tokens, index_head_dim)
    state = read_layer(layer, "full")
    assert fields(state) == (5, 5, 5, 0, 0)  # a dynamic layer's keys: slots read as for any dynamic layer
    assert state.bytes_held == 5 * TOKEN_BYTES + 5 * 8 * 4 == held_bytes(layer)
    assert "no slot reading" not in capsys.readouterr().err
