import math
import time

from kvlab.measure.timing import DecodeClock, interleaved, median


def test_clock_ignores_the_prompt_and_times_decode():
    clock = DecodeClock()
    clock.put("prompt")
    for _ in range(3):
        time.sleep(0.01)
        clock.put("token")
    clock.end()
    assert len(clock.stamps) == 3
    assert 0 < clock.decode_tokens_per_s < 200  # two decoded tokens, 10 ms apart
    assert clock.prefill_seconds > 0


def test_interleaving_runs_every_configuration_once_per_repeat():
    assert interleaved(["a", "b"], 2) == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]


def test_median_skips_nan():
    assert median([3.0, float("nan"), 1.0, 2.0]) == 2.0
    assert math.isnan(median([float("nan")]))
