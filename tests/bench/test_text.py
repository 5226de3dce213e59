import pytest

from kvlab.bench.text import pydoc_text, token_windows


def test_pydoc_text_is_real_english_available_offline():
    text = pydoc_text()
    assert len(text) > 100_000 and "the " in text


def test_windows_are_seeded_sized_and_distinct(byte_tokenizer):
    first = token_windows(byte_tokenizer, 50, 3, seed=0)
    again = token_windows(byte_tokenizer, 50, 3, seed=0)
    other = token_windows(byte_tokenizer, 50, 3, seed=1)
    assert [w.shape for w in first] == [(1, 50)] * 3
    assert all((a == b).all() for a, b in zip(first, again))
    assert any((a != b).any() for a, b in zip(first, other))
    assert len({tuple(w[0].tolist()) for w in first}) == 3


def test_too_many_windows_is_refused(byte_tokenizer):
    with pytest.raises(ValueError, match="holds"):
        token_windows(byte_tokenizer, 100_000, 50)
