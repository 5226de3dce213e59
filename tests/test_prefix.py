"""kvlab.prefix: one prefilled prefix, a deep copy per question, and the trailing-space pitfall."""

import pytest

from kvlab.prefix import PrefixMismatchError, answer, answer_without_reuse, check_token_prefix, prefill_prefix

PREFIX = "Shop facts: a tube costs 12 euros, truing costs 18 euros, we close on Sundays.\n"
QUESTION = "Question: How much is truing?\nAnswer:"


def test_check_token_prefix_names_the_position_and_both_tokens():
    check_token_prefix([1, 2], [1, 2, 3])
    with pytest.raises(PrefixMismatchError, match="at position 1 the prefix has id 5 but prefix\\+question tokenizes to id 2"):
        check_token_prefix([1, 5], [1, 2, 3])
    with pytest.raises(PrefixMismatchError, match="adds nothing"):
        check_token_prefix([1, 2], [1, 2])


@pytest.mark.real_model
@pytest.mark.parametrize("kind, options", [("dynamic", {}), ("static", {"max_cache_len": 64})])
def test_reuse_gives_the_same_tokens_as_no_reuse(smollm2, kind, options):
    model, tok = smollm2
    prefix = prefill_prefix(model, tok, PREFIX, cache=kind, **options)
    held = prefix.bytes
    reused = answer(model, tok, prefix, QUESTION, max_new_tokens=4)
    reference = answer_without_reuse(model, tok, PREFIX, QUESTION, max_new_tokens=4, cache=kind, **options)
    assert reused.token_ids == reference.token_ids
    assert reused.prefilled_tokens == reference.prompt_tokens - len(prefix.ids)
    assert reused.copy_bytes == held  # a full copy of the prefilled cache
    assert prefix.bytes == held and prefix.cache.get_seq_length() == len(prefix.ids)  # the original is untouched


@pytest.mark.real_model
def test_a_prefix_ending_in_a_space_is_refused_and_would_have_answered_wrongly(smollm2):
    model, tok = smollm2
    prefix = prefill_prefix(model, tok, PREFIX + "Question: ")
    question = "How much is truing?\nAnswer:"
    with pytest.raises(PrefixMismatchError, match="' ' .* tokenizes to ' How'"):
        answer(model, tok, prefix, question)
    unchecked = answer(model, tok, prefix, question, max_new_tokens=4, check=False)
    reference = answer_without_reuse(model, tok, prefix.text, question, max_new_tokens=4)
    assert unchecked.token_ids != reference.token_ids
