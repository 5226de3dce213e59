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
