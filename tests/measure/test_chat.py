"""kvlab.measure.chat: reusing one cache across turns, and catching a cache that no longer matches the prompt."""

import pytest
import torch

from kvlab.measure.chat import THINK_DROPPING_TEMPLATE, CacheMismatchError, ChatSession, first_mismatch

QUESTIONS = ["Name a colour.", "Name another one."]


def chat(model, tokenizer, questions, **options):
    session = ChatSession(model, tokenizer, **options)
    for question in questions:
        session.ask(question)
    return session


def test_first_mismatch_accepts_a_true_prefix():
    assert first_mismatch([5, 6, 7], torch.tensor([[5, 6, 7, 8]])) is None


def test_first_mismatch_reports_the_first_differing_position():
    found = first_mismatch([5, 6, 7, 8], [5, 6, 9, 8, 10])
    assert (found.position, found.cached_id, found.prompt_id) == (2, 7, 9)
    assert (found.cached_tokens, found.prompt_tokens) == (4, 5)


def test_a_prompt_no_longer_than_the_cache_is_a_mismatch():
    assert first_mismatch([5, 6, 7], [5, 6, 7]).position == 3
    short = first_mismatch([5, 6, 7], [5, 6])
    assert (short.position, short.cached_id, short.prompt_id) == (2, 7, None)


def test_first_mismatch_refuses_a_batch():
    with pytest.raises(ValueError, match="one sequence"):
        first_mismatch([1], torch.ones(2, 3, dtype=torch.long))


def test_unknown_on_mismatch_is_refused_before_anything_else():
    with pytest.raises(ValueError, match="valid: raise, warn, crop, ignore"):
        ChatSession(None, None, on_mismatch="retry")


@pytest.mark.real_model
def test_reused_cache_prefills_only_the_new_turn_and_matches_fresh_caches(smollm2):
    model, tok = smollm2
    reused = chat(model, tok, QUESTIONS, max_new_tokens=4)
    fresh = chat(model, tok, QUESTIONS, max_new_tokens=4, reuse=False)
    second, second_fresh = reused.turns[1], fresh.turns[1]
    assert second.reused_tokens > 0
    assert second.prefilled_tokens == second.prompt_tokens - second.reused_tokens
    assert second_fresh.prefilled_tokens == second_fresh.prompt_tokens
    assert [t.reply_ids for t in reused.turns] == [t.reply_ids for t in fresh.turns]
    # what the session believes the cache holds is what the cache holds
    assert len(reused.cached_ids) == reused.cache.get_seq_length()


@pytest.mark.real_model
def test_a_template_that_drops_the_think_block_is_caught(smollm2):
    model, tok = smollm2
    session = ChatSession(model, tok, chat_template=THINK_DROPPING_TEMPLATE, max_new_tokens=3)
    session.ask(QUESTIONS[0])
    think_at = session.cached_ids.index(tok.convert_tokens_to_ids("<"), session.turns[0].prompt_tokens - 12)
    with pytest.raises(CacheMismatchError, match=f"position {think_at}: cached '<'"):
        session.ask(QUESTIONS[1])
    assert session.messages[-1]["role"] == "assistant"  # the refused turn left no trace in the conversation


@pytest.mark.real_model
def test_crop_on_mismatch_gives_the_fresh_cache_answer(smollm2):
    model, tok = smollm2
    cropped = chat(model, tok, QUESTIONS, chat_template=THINK_DROPPING_TEMPLATE, on_mismatch="crop", max_new_tokens=4)
    fresh = chat(model, tok, QUESTIONS, chat_template=THINK_DROPPING_TEMPLATE, reuse=False, max_new_tokens=4)
    turn = cropped.turns[1]
    assert turn.mismatch is not None and turn.reused_tokens == turn.mismatch.position
    assert cropped.cache.trace.crops[-1]["n"] == turn.mismatch.position - turn.mismatch.cached_tokens
    assert turn.reply_ids == fresh.turns[1].reply_ids


def test_turn_prefills_reads_one_prefill_per_generate_call_from_a_watched_trace(tiny, prompt_ids):
    from transformers import DynamicCache

    import kvlab
    from kvlab.measure.chat import turn_prefills

    model, ids = tiny("tiny-llama"), prompt_ids(12)
    with kvlab.watch(model) as watch:
        cache = DynamicCache(config=model.config)
        first = model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=4, cache=cache, pad_token_id=0
        )
        follow = torch.cat([first, prompt_ids(5, seed=1)], dim=-1)  # (1, 12 + 4 + 5)
        model.generate(
            follow,
            attention_mask=torch.ones_like(follow),
            do_sample=False,
            max_new_tokens=3,
            cache=cache,
            pad_token_id=0,
        )
    # turn 1 prefills the 12 prompt ids; turn 2 the last reply id the cache never saw, plus the 5 new ids
    assert turn_prefills(watch.trace) == [12, 1 + 5]
