"""Drop-in gaps closed in `InstrumentedCacheMixin`: crop takes any integral scalar, the trace stays exact after
reset / reorder / batch select / batch repeat, and instrumented caches (offloaded ones too) deep-copy.

Before: crop(torch.tensor(-3)) and crop(np.int64(-3)) were refused; after cache.reset() the trace still reported
the bytes from before; copy.deepcopy of an offloaded cache failed ("cannot pickle 'torch.Stream'")."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import DynamicCache, StaticCache

import kvlab
from kvlab.caches import CacheCropError

KINDS = [
    ("dynamic", {}),
    ("static", {"max_cache_len": 32}),
    ("offloaded", {}),
    ("offloaded_static", {"max_cache_len": 32}),
    ("quantized", {"backend": "quanto", "nbits": 4, "q_group_size": 16, "residual_length": 4}),
]


def by_hand(cache, nbits: int = 0, q_group_size: int = 0) -> int:
    """The bytes a cache's layers hold, from tensor shapes alone (not kvlab's storage counter, which the trace
    uses): numel x element size of every plain key and value tensor, and for a quanto-packed one `nbits` / 8
    bytes per element plus a scale and a shift (in the keys' dtype) per `q_group_size` elements. Right for these
    tiny-llama caches, whose key and value tensors are never views into a larger storage."""
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values", "_quantized_keys", "_quantized_values"):
            tensor = getattr(layer, name, None)
            if tensor is None:
                continue
            if type(tensor) is torch.Tensor:
                total += tensor.numel() * tensor.element_size()
            else:  # packed: the shape is the logical one, the dtype the one it dequantizes to
                total += tensor.numel() * nbits // 8 + tensor.numel() // q_group_size * 2 * tensor.element_size()
    return total


def kv_formula(config, tokens: int, batch: int = 1, dtype_bytes: int = 4) -> int:
    """layers x kv heads x head dim x tokens x batch x 2 (keys and values) x bytes per element."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * config.num_key_value_heads * head_dim * tokens * batch * 2 * dtype_bytes


def prefilled(model, kind, options, ids):
    cache = kvlab.make_cache(kind, model.config, **options)
    with torch.inference_mode():
        model(ids, cache=cache)
    return cache


@pytest.mark.parametrize(
    "count", [torch.tensor(-3), np.int64(-3), np.int32(-3), -3], ids=["torch", "np64", "np32", "int"]
)
def test_crop_takes_any_integral_scalar(tiny, prompt_ids, count):
    model = tiny("tiny-llama")
    ours = prefilled(model, "dynamic", {}, prompt_ids(10))
    theirs = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(prompt_ids(10), cache=theirs)
    ours.crop(count)
    theirs.crop(-3)
    assert ours.get_seq_length() == theirs.get_seq_length() == 7
    assert ours.trace.crops[-1]["n"] == -3 and isinstance(ours.trace.crops[-1]["n"], int)
    # a crop keeps a view of the 10-token tensors: their storage is still held, and the trace says so
    assert ours.trace.summary()["final_bytes"] == kv_formula(model.config, tokens=10)
    assert by_hand(theirs) == kv_formula(model.config, tokens=7)  # what the views show, for contrast


@pytest.mark.parametrize(
    "count",
    [torch.tensor(-1.5), -1.5, True, "3", torch.tensor([-1, -2])],
    ids=["float-tensor", "float", "bool", "str", "1-d"],
)
def test_crop_refuses_what_is_not_a_count_in_one_line(tiny, prompt_ids, count):
    cache = prefilled(tiny("tiny-llama"), "dynamic", {}, prompt_ids(6))
    with pytest.raises(CacheCropError, match="crop takes an integer count of tokens") as err:
        cache.crop(count)
    assert "\n" not in str(err.value) and cache.get_seq_length() == 6


@pytest.mark.parametrize("kind, options", KINDS, ids=[k for k, _ in KINDS])
def test_the_trace_stays_exact_after_reset_reorder_select_and_repeat(tiny, prompt_ids, kind, options):
    model = tiny("tiny-llama")
    cache = prefilled(model, kind, options, prompt_ids(8, batch=2))

    nbits, group = options.get("nbits", 0), options.get("q_group_size", 0)

    def exact():
        assert (
            cache.trace.summary()["final_bytes"] == cache.kvlab_recorder.total_bytes() == by_hand(cache, nbits, group)
        )

    exact()
    if kind != "quantized":  # the hand count itself, against the formula: 8 tokens, or 32 static slots, x 2 rows
        assert by_hand(cache) == kv_formula(model.config, tokens=32 if "static" in kind else 8, batch=2)
    cache.reorder_cache(torch.tensor([1, 0]))
    exact()
    if kind in ("dynamic", "offloaded"):  # only DynamicLayer has batch select / repeat in transformers
        cache.batch_repeat_interleave(2)
        exact()
        assert cache.layers[0].keys.shape[0] == 4
        cache.batch_select_indices(torch.tensor([0, 3]))
        exact()
    before = cache.trace.summary()["final_bytes"]
    cache.reset()
    exact()
    if kind in ("dynamic", "offloaded", "quantized"):  # dropped, not zeroed: the trace must say so
        assert cache.trace.summary()["final_bytes"] < before


@pytest.mark.parametrize("kind, options", KINDS[:4], ids=[k for k, _ in KINDS[:4]])
def test_deep_copy_is_independent_with_its_own_trace(tiny, prompt_ids, kind, options):
    model = tiny("tiny-gemma3")
    ids = prompt_ids(6)
    cache = prefilled(model, kind, options, ids)
    events, prefix_bytes = list(cache.trace.events), cache.trace.summary()["final_bytes"]
    copied = copy.deepcopy(cache)
    assert type(copied) is type(cache) and copied.trace is not cache.trace and copied.trace.events == events
    if getattr(cache, "offloading", False):
        assert copied.prefetch_stream is not cache.prefetch_stream
    full = torch.cat([ids, prompt_ids(3, seed=1)], dim=1)
    reference = (
        StaticCache(config=model.config, max_cache_len=32) if "static" in kind else DynamicCache(config=model.config)
    )
    with torch.inference_mode():
        model(ids, cache=reference)
    kwargs = dict(
        attention_mask=torch.ones_like(full),
        max_new_tokens=4,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_logits=True,
    )
    ours = model.generate(full, cache=copied, **kwargs)
    theirs = model.generate(full, cache=copy.deepcopy(reference), **kwargs)
    assert torch.equal(ours.sequences, theirs.sequences)
    torch.testing.assert_close(torch.stack(ours.logits), torch.stack(theirs.logits), rtol=0, atol=0)
    assert cache.trace.events == events and cache.trace.summary()["final_bytes"] == prefix_bytes  # untouched
    assert cache.get_seq_length() == 6 and copied.get_seq_length() == 6 + 3 + 3
