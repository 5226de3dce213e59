"""Each kind of prediction is scored on its own scale; an open question folds its answer away instead of printing
it under the question, and never shows a fake score."""

from __future__ import annotations

import pytest

import kvlab
from kvlab.predictions import score


@pytest.fixture(autouse=True)
def english():
    kvlab.set_language("en")
    yield
    kvlab.set_language(None)


def test_open_question_folds_its_answer_into_the_html_only():
    open_question = score(None, 23040, unit=" B", label="cache:")
    assert "23,040" not in open_question and open_question.startswith("cache: no guess yet")
    html = open_question._repr_html_()
    assert html.startswith('<details class="kvlab-answer"><summary>cache: no guess yet: show the measured answer')
    assert "<p>measured 23,040 B." in html and html.index("23,040") > html.index("</summary>")


def test_a_scored_guess_is_plain_text():
    scored = score(13, 13, unit=" tokens", kind="count", label="tokens:")
    assert scored == "tokens: your guess 13 tokens; measured 13 tokens: exact"
    assert scored._repr_html_() is None


def test_a_word_answer_is_right_however_it_is_written():
    assert score("hqq 8-bit", "hqq 8 bits", kind="choice").endswith(": right")
    assert score(" Ramp ", "ramp", kind="choice").endswith(": right")
    assert score("saw", "ramp", kind="choice").endswith(": wrong")


def test_count_is_exact_or_off_by_so_many():
    assert score(13, 13, unit=" tokens", kind="count") == "your guess 13 tokens; measured 13 tokens: exact"
    assert score(12, 1, kind="count") == "your guess 12; measured 1: 11 too many"
    assert score(512, 511, unit=" tokens", kind="count") == "your guess 512 tokens; measured 511 tokens: 1 too many"
    assert score(2, 5, kind="count").endswith(": 3 too few")


def test_amount_is_off_by_a_share_of_itself():
    assert score(1500, 1200, unit=" B") == "your guess 1,500 B; measured 1,200 B: +25% (far off)"
    assert score(2.0, 2.05, unit="x").endswith("-2% (spot on)")
    assert score(0, 0) == "your guess 0; measured 0: right"


def test_share_is_off_by_percentage_points():
    assert score(50.0, 3.125, unit=" %", kind="share") == (
        "your guess 50 %; measured 3.12 %: +46.9 percentage points (far off)"
    )
    assert score(10, 15.2, unit=" %", kind="share").endswith("-5.2 percentage points (close)")


def test_choice_is_right_or_wrong():
    assert score(True, False, kind="choice") == "your guess yes; measured no: wrong"
    assert score("static", "static", kind="choice") == "your guess static; measured static: right"


def test_unknown_kind_names_the_valid_ones():
    with pytest.raises(ValueError, match="count, amount, share, choice"):
        score(1, 1, kind="percent")


def test_portuguese_marks_and_words():
    kvlab.set_language("pt-BR")
    assert score(1500, 1200, unit=" B") == "seu palpite 1.500 B; medido 1.200 B: +25% (longe)"
    assert score(12, 1, kind="count") == "seu palpite 12; medido 1: 11 a mais"
    assert "23.040 B" in score(None, 23040, unit=" B")._repr_html_()
    assert score(True, True, kind="choice") == "seu palpite sim; medido sim: certo"
