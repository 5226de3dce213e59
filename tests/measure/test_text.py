import pytest

from kvlab.measure import text


def test_english_text_is_prose_in_a_fixed_order():
    body = text.english_text()
    assert body.startswith("Objects, values and types")
    assert body == text.english_text()
    assert len(body.split()) > 3000


@pytest.mark.real_model
def test_prompt_ids_are_a_prefix_of_the_text(smollm2):
    _, tokenizer = smollm2
    short, long = text.prompt_ids(tokenizer, 50), text.prompt_ids(tokenizer, 700)
    assert short.shape == (1, 50) and long.shape == (1, 700)
    assert (long[:, :50] == short).all()
    with pytest.raises(ValueError, match="only"):
        text.prompt_ids(tokenizer, 10**6)


def test_pydoc_text_is_real_english_available_offline():
    body = text.pydoc_text()
    assert len(body) > 100_000 and "the " in body


def test_windows_are_seeded_sized_and_distinct(byte_tokenizer):
    first = text.token_windows(byte_tokenizer, 50, 3, seed=0)
    again = text.token_windows(byte_tokenizer, 50, 3, seed=0)
    other = text.token_windows(byte_tokenizer, 50, 3, seed=1)
    assert [w.shape for w in first] == [(1, 50)] * 3
    assert all((a == b).all() for a, b in zip(first, again))
    assert any((a != b).any() for a, b in zip(first, other))
    assert len({tuple(w[0].tolist()) for w in first}) == 3


def test_too_many_windows_is_refused(byte_tokenizer):
    with pytest.raises(ValueError, match="holds"):
        text.token_windows(byte_tokenizer, 100_000, 50)
