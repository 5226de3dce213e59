"""Each kind of prediction is scored on its own scale; an open question shows the answer, not a fake score."""

from __future__ import annotations

import pytest

import kvlab
from kvlab.predictions import score


@pytest.fixture(autouse=True)
def english():
    kvlab.set_language("en")
    yield
    kvlab.set_language(None)


def test_open_question_shows_the_answer():
    assert score(None, 23040, unit=" B") == (
        "no guess yet; measured 23,040 B. Enter your guess above and run both cells again."
    )


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
    assert score(None, 23040, unit=" B").startswith("ainda sem palpite; medido 23.040 B.")
    assert score(True, True, kind="choice") == "seu palpite sim; medido sim: certo"
