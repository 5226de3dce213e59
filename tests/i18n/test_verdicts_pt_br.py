"""A timing verdict in Portuguese reads as a native writes it, for every pair of labels the notebooks compare
(issue 42): "B vs. A: 3,04x mais devagar (2,73-3,18)", no verb to agree with a plural or feminine label and no
article missing before a common noun; the steps of one configuration read "passos de flush (hqq 4 bits)"."""

from __future__ import annotations

import pytest

from kvlab.i18n import set_language
from kvlab.measure import step_times
from kvlab.measure.timing import Comparison, Timing

# The label pairs the notebooks print verdicts for (00, 02, 04, 06, 07, 08, 10, 12), as their pt-BR twins name them.
PAIRS = [
    ("demais passos (hqq 4 bits)", "passos de flush (hqq 4 bits)"),
    ("cache novo", "cache reutilizado"),
    ("decodificação greedy", "decodificação especulativa"),
    ("DynamicCache", "StaticCache(4096)"),
    ("max_cache_len 224", "max_cache_len 3.584"),
    ("sequencial", "em lote"),
    ("eager", "compilado"),
    ("prompt de 16 tokens", "prompt de 128 tokens"),
]


@pytest.fixture
def portuguese():
    set_language("pt-BR")
    yield
    set_language(None)


def _comparison(a: str, b: str, ratio: float) -> Comparison:
    times = [1.0, 1.01, 0.99]
    return Comparison(Timing(a, times), Timing(b, [t * ratio for t in times]), ratio, ratio * 0.9, ratio * 1.1)


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_a_portuguese_verdict_needs_no_agreement_with_its_labels(portuguese, a, b):
    assert _comparison(a, b, 3.04).verdict() == f"{b} vs. {a}: 3,04x mais devagar (2,74-3,34)"
    assert _comparison(a, b, 0.5).verdict() == f"{b} vs. {a}: 2,00x mais rápido (1,82-2,22)"


def test_the_english_verdict_is_unchanged():
    assert _comparison("dynamic", "static", 1.62).verdict() == "static is 1.62x slower than dynamic (1.46-1.78)"


def test_the_steps_of_a_configuration_name_the_steps_first_in_portuguese(portuguese):
    runs = [[0.01, 0.03, 0.01, 0.03], [0.02, 0.04, 0.02, 0.04]]
    steps = [Timing(f"s{i}", [r[i] for r in runs]) for i in range(4)]
    result = step_times.StepTimes("hqq 4 bits", runs, steps, [1, 2, 3, 4], Timing("x", [0.02]), Timing("q", [1]))
    others, flushes = step_times.split_steps(result, [2, 4])
    assert (flushes.label, others.label) == ("passos de flush (hqq 4 bits)", "demais passos (hqq 4 bits)")
