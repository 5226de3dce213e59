"""kvlab.measure.prefix: one prefilled prefix, a deep copy per question, and the trailing-space pitfall."""

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import StaticCache

import kvlab
from kvlab.measure.prefix import (
    PrefixMismatchError,
    cache_bytes,
    check_token_prefix,
    time_first_token,
    token_prefix,
    tokens_fed_after_copy,
)
from kvlab.recorded_run import encode

PREFIX = "Shop facts: a tube costs 12 euros, truing costs 18 euros, we close on Sundays.\n"


def test_check_token_prefix_names_the_position_and_both_tokens():
    check_token_prefix([1, 2], [1, 2, 3])
    with pytest.raises(
        PrefixMismatchError, match="at position 1 the prefix has id 5 but prefix\\+question tokenizes to id 2"
    ):
        check_token_prefix([1, 5], [1, 2, 3])
    with pytest.raises(PrefixMismatchError, match="adds nothing"):
        check_token_prefix([1, 2], [1, 2])


@pytest.mark.real_model
def test_a_prefix_ending_in_a_space_is_refused(smollm2):
    _, tok = smollm2
    prefix, question = PREFIX + "Question: ", "How much is truing?\nAnswer:"
    with pytest.raises(PrefixMismatchError, match="' ' .* tokenizes to ' How'"):
        check_token_prefix(encode(tok, prefix)[0].tolist(), encode(tok, prefix + question)[0].tolist(), tok)


class _SpaceTokenizer:
    """Splits on spaces and keeps a trailing space as its own token, as byte-level BPE does."""

    def __call__(self, text):
        words = text.split(" ")
        tokens = [words[0]] + [" " + w for w in words[1:] if w] + ([" "] if text.endswith(" ") else [])
        return SimpleNamespace(input_ids=[sum(map(ord, t)) for t in tokens], tokens=tokens)

    def convert_ids_to_tokens(self, ids):
        return [f"t{i}" for i in ids]


def test_token_prefix_finds_the_seam_a_trailing_space_breaks():
    tok = _SpaceTokenizer()
    clean = token_prefix(tok, "You help.", " Why?")
    assert clean.ok and clean.mismatch is None and clean.full_ids[:2] == clean.prefix_ids
    spaced = token_prefix(tok, "You help. ", "Why?")
    assert not spaced.ok and spaced.mismatch == 2  # " " alone in the prefix, " Why?" in the full prompt
    assert len(spaced.prefix_tokens) == 3 and len(spaced.full_tokens) == 3
    assert token_prefix(tok, "You help.", "").mismatch == 2  # nothing after the prefix: not reusable either


@pytest.mark.real_model
def test_the_guides_own_prefix_ends_in_a_lone_space_token_with_smollm2(smollm2):
    _, tok = smollm2
    check = token_prefix(tok, "You are a helpful assistant. ", "What is the capital of France?")
    assert check.mismatch == 6 and check.prefix_tokens[-2:] == (".", "Ġ") and check.full_tokens[6] == "ĠWhat"


def test_tokens_fed_after_copy_counts_only_the_copys_own_prefill(tiny, prompt_ids):
    model = tiny("tiny-llama")
    ids = prompt_ids(6)
    full = torch.cat([ids, prompt_ids(4, seed=1)], dim=-1)
    prompt_cache = StaticCache(config=model.config, max_cache_len=16)
    with kvlab.watch(model) as watch:
        with torch.no_grad():
            prompt_cache = model(input_ids=ids, past_key_values=prompt_cache).cache
        model.generate(
            input_ids=full,
            attention_mask=torch.ones_like(full),
            past_key_values=copy.deepcopy(prompt_cache),
            max_new_tokens=3,
            do_sample=False,
        )
    original, copied = watch.traces
    assert copied.meta["copied_from"] == 0
    assert tokens_fed_after_copy(copied) == 4
    assert tokens_fed_after_copy(original) == 6  # not a copy: its first forward


def _guide_recipe(model, prefix_ids, max_new_tokens=1):
    """The guide's prefix recipe on a tiny model: a prefilled StaticCache, and the two per-request calls."""
    prompt_cache = StaticCache(config=model.config, max_cache_len=24)
    with torch.no_grad():
        prompt_cache = model(input_ids=prefix_ids, past_key_values=prompt_cache).cache

    def with_prefix(full):
        past_key_values = copy.deepcopy(prompt_cache)
        return model.generate(
            input_ids=full,
            attention_mask=torch.ones_like(full),
            past_key_values=past_key_values,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=0,
        )

    def without_prefix(full):
        return model.generate(
            input_ids=full,
            attention_mask=torch.ones_like(full),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=0,
        )

    return prompt_cache, with_prefix, without_prefix, lambda: copy.deepcopy(prompt_cache)


def test_time_first_token_times_both_calls_and_the_copy_beside_the_exact_work(tiny, prompt_ids):
    model = tiny("tiny-llama")
    prefix_ids = prompt_ids(6)
    requests = [torch.cat([prefix_ids, prompt_ids(n, seed=n)], dim=-1) for n in (4, 3)]
    prompt_cache, with_prefix, without_prefix, deep_copy = _guide_recipe(model, prefix_ids)
    result = time_first_token(
        model, with_prefix, without_prefix, deep_copy, requests, repeats=3, labels=("reused", "whole", "copy")
    )
    assert result.prefilled_with_prefix == [4, 3]  # only the question's tokens: the copy holds the prefix
    assert result.prefilled_without_prefix == [10, 9]  # the whole prompt
    assert result.copy_bytes == cache_bytes(prompt_cache) > 0  # a copy duplicates every slot of the StaticCache
    assert prompt_cache.get_seq_length() == 6  # the prefilled cache itself is never generated into
    assert [t.label for t in result.with_prefix] == ["reused"] * 2
    assert [t.label for t in result.without_prefix] == ["whole"] * 2
    assert result.deep_copy.label == "copy"
    for timed in (*result.with_prefix, *result.without_prefix, result.deep_copy):
        assert len(timed.times) == 3 and all(t > 0 for t in timed.times)
    series = result.series()
    assert list(series) == ["reused", "whole"]
    assert [tokens for tokens, _timing in series["reused"]] == [4, 3]
    assert series["whole"][0][1] is result.without_prefix[0]


def test_time_first_token_refuses_a_call_that_also_decodes(tiny, prompt_ids):
    model = tiny("tiny-llama")
    prefix_ids = prompt_ids(6)
    _, with_prefix, without_prefix, deep_copy = _guide_recipe(model, prefix_ids, max_new_tokens=2)
    full = torch.cat([prefix_ids, prompt_ids(3, seed=3)], dim=-1)
    with pytest.raises(ValueError, match="ran 2 forwards.*max_new_tokens=1"):
        time_first_token(model, with_prefix, without_prefix, deep_copy, [full], repeats=1)
    with pytest.raises(ValueError, match="at least one request"):
        time_first_token(model, with_prefix, without_prefix, deep_copy, [], repeats=1)
