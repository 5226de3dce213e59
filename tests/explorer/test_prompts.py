from __future__ import annotations

import pytest

from kvlab.explorer.models import ByteTokenizer
from kvlab.explorer.prompts import PROMPTS_DIR, encode_prompt, presets


def test_presets_are_the_data_files():
    found = presets()
    assert set(found) == {p.stem for p in PROMPTS_DIR.glob("*.txt")}
    assert all(text.strip() for text in found.values())


@pytest.mark.parametrize("target", [1, 7, 100])
def test_synthetic_prompts_have_exactly_the_asked_length(target):
    ids = encode_prompt(ByteTokenizer(), "abc", target)
    assert ids.shape == (1, target)
    assert ids[0, :3].tolist() == ByteTokenizer().encode("abc")[:target]


def test_zero_keeps_the_text_as_typed_and_bad_input_is_refused():
    assert encode_prompt(ByteTokenizer(), "abcd", 0).shape == (1, 4)
    with pytest.raises(ValueError, match="the prompt is empty"):
        encode_prompt(ByteTokenizer(), "  ", 0)
    with pytest.raises(ValueError, match="positive token count"):
        encode_prompt(ByteTokenizer(), "abc", -5)
    with pytest.raises(ValueError, match="no chat template"):
        encode_prompt(ByteTokenizer(), "abc", chat=True)
