"""transformers' cache integration scenarios, re-run with kvlab's caches on the bundled SmolLM2: each checks the
tokens, the logits (bit for bit) and the bytes against transformers' own classes driven the same way.

Scenarios: a left-padded batch, beam search (the cache is reordered every step), extra left padding, a deep copy
per question (also of an offloaded cache), batch size changes (repeat_interleave / select_indices), continuing
from a cache, split-and-gather (two halves vs the whole batch), and a sliding window set on the config.
transformers' offloaded caches cannot run on a CPU-only torch: kvlab's are compared with the same cache without
offloading. Prompts are short and generations 4-5 tokens: the whole file is about 10 s on one thread."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from transformers import DynamicCache, StaticCache

import kvlab
from kvlab import _compat
from kvlab.caches import CacheOptionError
from kvlab.recording.layer_state import layer_kinds, read_layer

from .variants import variants

PROMPTS = ["The cache stores keys", "A short one"]
QUANTIZED = "q-quanto-int4-r2"  # a residual of 2: these 3-4 token generations flush


def held(cache, config) -> int:
    kinds = layer_kinds(config)
    return sum(read_layer(layer, kinds[i]).bytes_held for i, layer in enumerate(cache.layers))


def assert_same(model, ours, theirs, a, b):
    """Same tokens, bit-identical logits, and the same bytes held; the trace reports what the cache holds."""
    assert torch.equal(a[0], b[0])
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
    assert held(ours, model.config) == held(theirs, model.config)
    assert ours.trace.summary()["final_bytes"] == ours.kvlab_recorder.total_bytes() == held(ours, model.config)


@pytest.fixture(scope="module")
def batch(smollm2):
    _, tokenizer = smollm2
    tokenizer.padding_side = "left"
    return tokenizer(PROMPTS, return_tensors="pt", padding=True)


@pytest.mark.parametrize("variant", variants("dynamic", "static", "offloaded", QUANTIZED))
def test_left_padded_batch(greedy, smollm2, batch, variant):
    model, _ = smollm2
    ours, theirs = variant.build(model.config), variant.reference(model.config)
    assert_same(
        model, ours, theirs, greedy(model, batch, ours, 4, logits=True), greedy(model, batch, theirs, 4, logits=True)
    )


@pytest.mark.parametrize("variant", variants("dynamic", "static"))
def test_beam_search_reorders_the_cache(greedy, smollm2, batch, variant):
    model, _ = smollm2
    ours, theirs = variant.build(model.config), variant.reference(model.config)
    reorders = []
    reorder = ours.reorder_cache
    ours.reorder_cache = lambda beam_idx: (reorders.append(beam_idx.tolist()), reorder(beam_idx))[1]
    a = greedy(model, batch, ours, 4, logits=True, num_beams=2)
    b = greedy(model, batch, theirs, 4, logits=True, num_beams=2)
    assert_same(model, ours, theirs, a, b)
    assert len(reorders) >= 3 and ours.layers[0].keys.shape[0] == 4  # 2 prompts x 2 beams, reordered every step


def test_extra_left_padding_changes_nothing(greedy, smollm2, batch):
    model, _ = smollm2
    extra = {
        "input_ids": torch.nn.functional.pad(batch.input_ids, (3, 0), value=2),
        "attention_mask": torch.nn.functional.pad(batch.attention_mask, (3, 0), value=0),
    }
    ours, theirs = (
        kvlab.make_cache("static", model.config, max_cache_len=24),
        StaticCache(config=model.config, max_cache_len=24),
    )
    padded = greedy(model, extra, ours, 4, logits=True)
    assert_same(model, ours, theirs, padded, greedy(model, extra, theirs, 4, logits=True))
    plain = greedy(model, batch, kvlab.make_cache("static", model.config, max_cache_len=24), 4, logits=True)
    assert torch.equal(padded[0][:, 3:], plain[0])  # transformers' scenario: the same text with 3 more pads


@pytest.mark.parametrize("variant", variants("offloaded", "offloaded_static"))
def test_deep_copy_per_question(greedy, smollm2, variant):
    """The prefix-cache recipe: prefill with model(...), copy.deepcopy per question, generate (offloaded caches:
    their prefetch stream cannot be copied; the other kinds are checked on tiny models in test_base.py)."""
    model, tokenizer = smollm2
    prefix = tokenizer("You answer briefly.", return_tensors="pt").input_ids
    ours, theirs = variant.build(model.config), variant.reference(model.config)
    with torch.inference_mode():
        model(prefix, **{_compat.CACHE_KWARG: ours})
        model(prefix, **{_compat.CACHE_KWARG: theirs})
    prefilled = ours.trace.summary()["final_bytes"]
    for question in (" What is a cache?", " Why copy?"):
        ids = torch.cat([prefix, tokenizer(question, return_tensors="pt").input_ids], dim=1)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        mine, reference = copy.deepcopy(ours), copy.deepcopy(theirs)
        assert mine.trace is not ours.trace and mine.trace.events == ours.trace.events
        assert_same(
            model,
            mine,
            reference,
            greedy(model, inputs, mine, 3, logits=True),
            greedy(model, inputs, reference, 3, logits=True),
        )
    assert ours.trace.summary()["final_bytes"] == prefilled == held(ours, model.config)  # the prefix is untouched


def test_batch_size_changes(smollm2):
    """Prefill once, repeat the cache for three continuations, then keep two of them."""
    model, tokenizer = smollm2
    prompt = tokenizer("The cache", return_tensors="pt").input_ids
    ours, theirs = kvlab.make_cache("dynamic", model.config), DynamicCache(config=model.config)
    with torch.inference_mode():
        for cache in (ours, theirs):
            model(prompt, **{_compat.CACHE_KWARG: cache})
            cache.batch_repeat_interleave(3)
        assert held(ours, model.config) == held(theirs, model.config) == ours.trace.summary()["final_bytes"]
        step = torch.tensor([[9], [99], [999]])
        a, b = model(step, **{_compat.CACHE_KWARG: ours}).logits, model(step, **{_compat.CACHE_KWARG: theirs}).logits
        assert torch.equal(a, b)
        for cache in (ours, theirs):
            cache.batch_select_indices(torch.tensor([0, 2]))
        assert held(ours, model.config) == held(theirs, model.config) == ours.trace.summary()["final_bytes"]
        a, b = (
            model(torch.tensor([[5], [6]]), **{_compat.CACHE_KWARG: ours}).logits,
            model(torch.tensor([[5], [6]]), **{_compat.CACHE_KWARG: theirs}).logits,
        )
    assert torch.equal(a, b) and ours.layers[0].keys.shape[0] == 2
    assert ours.trace.summary()["final_bytes"] == held(ours, model.config) == held(theirs, model.config)


@pytest.mark.parametrize("variant", variants("dynamic", QUANTIZED))
def test_continuing_from_a_cache(greedy, smollm2, variant):
    """Generate, then call generate again with the whole sequence and the same cache: only the new tokens run."""
    model, tokenizer = smollm2
    ids = tokenizer("Caches keep", return_tensors="pt").input_ids
    ours, theirs = variant.build(model.config), variant.reference(model.config)
    first = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    a, b = greedy(model, first, ours, 3, logits=True), greedy(model, first, theirs, 3, logits=True)
    assert_same(model, ours, theirs, a, b)
    more = {"input_ids": a[0], "attention_mask": torch.ones_like(a[0])}
    assert_same(
        model, ours, theirs, greedy(model, more, ours, 3, logits=True), greedy(model, more, theirs, 3, logits=True)
    )
    assert ours.get_seq_length() == ids.shape[1] + 5


def test_split_and_gather(greedy, smollm2, batch):
    """transformers' batch_split style: two halves with their own caches give the whole batch's tokens and bytes."""
    model, _ = smollm2
    whole_cache = kvlab.make_cache("dynamic", model.config)
    whole = greedy(model, batch, whole_cache, 4, logits=True)
    halves, caches = [], []
    for row in (0, 1):
        half = {k: v[row : row + 1] for k, v in batch.items()}
        ours, theirs = kvlab.make_cache("dynamic", model.config), DynamicCache(config=model.config)
        result = greedy(model, half, ours, 4, logits=True)
        assert_same(model, ours, theirs, result, greedy(model, half, theirs, 4, logits=True))
        halves.append(result)
        caches.append(ours)
    assert torch.equal(torch.cat([h[0] for h in halves]), whole[0])
    # alone, a row has no pads to mask: the same sums in another order. Rounding of float32 sums grows like
    # sqrt(terms) x eps (Higham), here layers x hidden terms, at the scale of the largest logit (~3e-5 measured)
    terms = model.config.num_hidden_layers * model.config.hidden_size
    atol = math.sqrt(terms) * torch.finfo(torch.float32).eps * float(whole[1].abs().max())
    torch.testing.assert_close(torch.cat([h[1] for h in halves], dim=1), whole[1], rtol=0, atol=atol)
    assert sum(c.trace.summary()["final_bytes"] for c in caches) == whole_cache.trace.summary()["final_bytes"]


def test_sliding_window_set_on_the_config(greedy, smollm2):
    """Every layer made sliding (window 6) on a copy of the config: the caches keep 5 tokens per layer."""
    model, tokenizer = smollm2
    config = copy.deepcopy(model.config)
    config.sliding_window, config.layer_types = 6, ["sliding_attention"] * config.num_hidden_layers
    ids = tokenizer("A sliding window keeps only the last tokens", return_tensors="pt").input_ids
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    ours, theirs = kvlab.make_cache("dynamic", config), DynamicCache(config=config)
    assert_same(
        model, ours, theirs, greedy(model, inputs, ours, 4, logits=True), greedy(model, inputs, theirs, 4, logits=True)
    )
    assert {r["slots_live"] for r in ours.trace.layer_table()} == {5}
    assert ours.trace.summary()["tokens_evicted"] > 0
    with pytest.raises(CacheOptionError, match="offload_only_non_sliding=True"):  # nothing would be offloaded
        kvlab.make_cache("offloaded", config, offload_only_non_sliding=True)
    offloaded = kvlab.make_cache("offloaded", config, offload_only_non_sliding=False)
    reference = DynamicCache(config=config)
    assert_same(
        model,
        offloaded,
        reference,
        greedy(model, inputs, offloaded, 4, logits=True),
        greedy(model, inputs, reference, 4, logits=True),
    )
