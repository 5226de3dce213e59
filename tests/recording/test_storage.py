import torch
from optimum.quanto import MaxOptimizer, qint2, qint4, quantize_weight

from kvlab.recording.storage import held_bytes, kv_storage_bytes, storage_bytes, view_bytes


def test_a_view_counts_its_whole_storage():
    base = torch.zeros(1, 2, 10, 4)  # (batch, kv_heads, seq, head_dim), float32
    window = base[:, :, -3:, :]
    assert view_bytes(window) == 1 * 2 * 3 * 4 * 4
    assert storage_bytes(window) == 1 * 2 * 10 * 4 * 4


def test_shared_storage_is_counted_once():
    base = torch.zeros(8, 8)
    assert storage_bytes(base, base[:2], base[4:]) == 8 * 8 * 4
    seen: set = set()
    assert storage_bytes(base, seen=seen) == 256
    assert storage_bytes(base[1:], seen=seen) == 0


def test_nested_containers_and_empty_tensors():
    a, b = torch.zeros(3, dtype=torch.float16), torch.zeros(5, dtype=torch.int8)
    assert storage_bytes((a, {"scale": b, "meta": 3}), None, torch.tensor([])) == 3 * 2 + 5


def test_quanto_packed_tensor_counts_packed_data_scale_and_shift():
    x = torch.randn(1, 3, 128, 64)
    for qtype, bits in ((qint4, 4), (qint2, 2)):
        scale, shift = MaxOptimizer()(x, qtype, 0, 64)
        q = quantize_weight(x, qtype, 0, scale, shift, 64)
        packed = x.numel() * bits // 8
        groups = x.numel() // 64
        assert storage_bytes(q) == packed + groups * scale.element_size() + groups * shift.element_size()
        assert storage_bytes(q) < q.numel() * q.element_size()  # what element_size() would claim


def test_the_key_value_fast_path_agrees_with_the_general_count():
    base = torch.zeros(1, 2, 10, 4)
    cases = [
        (base, torch.zeros(1, 2, 10, 4)),
        (base[:, :, 2:], base[:, :, :2]),
        (base, base),
        (torch.tensor([]), torch.tensor([])),
    ]
    for keys, values in cases:
        assert kv_storage_bytes(keys, values) == storage_bytes(keys, values)


class Holder:
    """An object that keeps tensors the way a cache layer does: as attributes, some in dicts, tuples and lists."""


def test_held_bytes_walks_every_attribute_and_counts_each_storage_once():
    holder = Holder()
    keys = torch.zeros(1, 2, 6, 4)  # (batch, kv_heads, seq, head_dim), float32: 192 bytes
    holder.keys, holder.values = keys[:, :, -3:], keys  # a window into the same storage: counted once
    holder.indexer_keys = torch.zeros(1, 6, 8, dtype=torch.float16)  # (batch, seq, index_head_dim): 96 bytes
    holder.buffers = {"compressor": (torch.zeros(5, dtype=torch.int8), [torch.zeros(2)]), "indexer": None}
    holder.empty = torch.tensor([])
    assert held_bytes(holder) == 192 + 96 + 5 + 8
    assert held_bytes(holder) == storage_bytes(*vars(holder).values())


def test_held_bytes_leaves_out_counters_kvlab_s_attributes_modules_and_classes():
    holder = Holder()
    holder.keys = torch.zeros(4, 4)  # 64 bytes: the only cached data
    holder.cumulative_length = torch.tensor(4)  # an integer scalar kept as a tensor: a counter
    holder._kvlab_recorder = {"log": torch.zeros(100)}  # what kvlab hangs on a layer is not the layer's
    holder.projection = torch.nn.Linear(4, 4)  # weights a layer might point at
    holder.quantizer = torch.nn.Linear  # a backend class
    assert held_bytes(holder) == 64
    holder.scale = torch.tensor(0.5)  # a floating scalar is data (an fp8 scale), not a counter
    assert held_bytes(holder) == 64 + 4


class _Holder:
    """A plain object with attributes, as a model's own Cache subclass or a layer is."""


def _cache_with_layer():
    from kvlab.recording.storage import outside_names

    layer = _Holder()
    layer.keys, layer.values = torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8)  # (batch, kv_heads, seq, head_dim)
    other = _Holder()  # another Cache: read on its own
    cache = _Holder()
    cache.layers, cache.linear_cache, cache.pools, cache.other = [layer], [], {}, other
    cache.window, cache.dtype, cache._kvlab_recorder = 5, torch.float32, torch.zeros(100)
    return cache, layer, other, outside_names


def test_state_beside_a_caches_layers_is_found_by_attribute_once_even_while_empty():
    cache, _layer, other, outside_names = _cache_with_layer()
    names = outside_names(cache, lambda value: value is other)
    assert names == ("linear_cache", "pools")  # not layers, numbers, dtypes, kvlab's own, another cache


def test_state_beside_the_layers_is_paired_with_its_layer_by_index_and_counted_once():
    from kvlab.recording.storage import outside_bytes

    cache, layer, other, outside_names = _cache_with_layer()
    names = outside_names(cache, lambda value: value is other)
    assert outside_bytes(cache, names, 2, cache.layers, lambda v: v is other).by_layer == {}
    state = torch.zeros(1, 4, 16, 16)  # MiniMax's linear state of layer 1: (batch, heads, head_dim, head_dim)
    cache.linear_cache += [[], state, state[:, :2]]  # a view of the same storage counts once
    base = torch.zeros(10, 10)
    holder = _Holder()
    holder.buffers = [base[:5], base[5:]]  # an object in a dict, its tensors in a list
    cache.pools.update(pool=holder, alias=layer.keys[..., :2, :], counter=torch.tensor(7))
    outside = outside_bytes(cache, names, 3, cache.layers, lambda v: v is other)
    assert outside.by_layer == {1: state.numel() * 4}
    assert outside.by_name == {"pools": base.numel() * 4}  # the layer's keys are the layer's; a counter is not data
    cache.linear_cache += [torch.zeros(2)]  # longer than the layers: no index says whose it is
    assert outside_bytes(cache, names, 3, cache.layers, lambda v: v is other).by_name["linear_cache"] == 4 * 4 * 256 + 8


def test_tensors_a_layer_keeps_in_lists_are_held():
    layer = _Holder()
    layer.recurrent_states = [torch.zeros(2, 3), torch.zeros(2, 3)]  # e.g. a linear layer's recorded states
    layer.keys = torch.zeros(4)
    assert held_bytes(layer) == 2 * 6 * 4 + 16
