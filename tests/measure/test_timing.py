"""The timing instrument: interleaving, medians with their spread, a ratio interval and a verdict to quote."""

import math
import re
import time
import warnings
from pathlib import Path

import pytest
import torch

from kvlab.measure.timing import (
    TOO_WIDE,
    Comparison,
    DecodeClock,
    NoisyTimingWarning,
    Stopwatch,
    Timing,
    compare,
    interleaved,
    median,
    per_step,
    ratio_interval,
    time_interleaved,
)

ROOT = Path(__file__).resolve().parents[2]


def test_clock_ignores_the_prompt_and_times_decode():
    clock = DecodeClock()
    clock.put("prompt")
    for _ in range(3):
        time.sleep(0.01)
        clock.put("token")
    clock.end()
    assert len(clock.stamps) == 3 and len(clock.step_seconds) == 2
    assert 0 < clock.decode_tokens_per_s < 200  # two decoded tokens, at least 10 ms apart
    assert clock.prefill_seconds > 0


def test_interleaving_runs_every_configuration_once_per_repeat():
    assert interleaved(["a", "b"], 2) == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]


def test_median_skips_nan():
    assert median([3.0, float("nan"), 1.0, 2.0]) == 2.0
    assert math.isnan(median([float("nan")]))


def test_time_interleaved_warms_up_then_alternates_and_times_only_the_work():
    calls = []
    timings = time_interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        repeats=3,
        warmup=1,
        before_each=lambda label: calls.append(f"setup-{label}"),
    )
    assert calls == ["setup-a", "a", "setup-b", "b"] + ["setup-a", "a", "setup-b", "b"] * 3
    assert [len(t.times) for t in timings.values()] == [3, 3]


def test_time_interleaved_sets_and_restores_torch_threads():
    before = torch.get_num_threads()
    seen = []
    time_interleaved({"a": lambda: seen.append(torch.get_num_threads())}, repeats=2, threads=1)
    assert set(seen) == {1} and torch.get_num_threads() == before


@pytest.mark.parametrize("repeats", [0, -1])
def test_time_interleaved_refuses_no_repeats(repeats):
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        time_interleaved({"a": lambda: None}, repeats=repeats)


def test_median_and_quartiles_come_from_the_times():
    timing = Timing("x", [0.010, 0.012, 0.011, 0.030, 0.011])
    assert timing.median == 0.011
    q1, q3 = timing.quartiles
    assert q1 <= timing.median <= q3
    assert "11.0 ms (IQR 11.0-12.0, 5 runs)" == timing.describe()


def test_a_clear_difference_is_quoted_with_its_interval():
    a = Timing("dynamic", [0.100, 0.101, 0.099, 0.100, 0.102, 0.100, 0.098])
    b = Timing("static", [0.162, 0.160, 0.165, 0.161, 0.163, 0.159, 0.164])
    result = compare(a, b)
    assert result.differs and not result.too_noisy
    assert result.low <= result.ratio <= result.high and result.low > 1.5
    assert re.fullmatch(r"static is 1\.6\dx slower than dynamic \(1\.\d\d-1\.\d\d\)", result.verdict())
    faster = compare(b, a).verdict()
    assert faster.startswith("dynamic is 1.6") and "faster than static" in faster


def test_overlapping_times_are_no_difference_and_the_interval_spans_one():
    a = Timing("a", [0.100, 0.104, 0.097, 0.101, 0.099, 0.103, 0.098])
    b = Timing("b", [0.101, 0.098, 0.103, 0.100, 0.097, 0.104, 0.099])
    result = compare(a, b)
    assert not result.differs and result.low < 1 < result.high
    assert result.verdict().startswith("no difference beyond noise: b / a = ")


def test_a_wide_spread_warns_and_says_it_cannot_tell():
    a = Timing("a", [0.1, 0.3, 0.1, 0.35, 0.12])
    b = Timing("b", [0.2, 0.1, 0.4, 0.15, 0.3])
    with pytest.warns(NoisyTimingWarning, match="too noisy"):
        result = compare(a, b)
    assert result.too_noisy and result.verdict().startswith("too noisy to tell")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compare(a, b, warn=False)


def test_a_wide_interval_beyond_one_still_states_the_direction():
    a = Timing("a", [0.30, 0.45, 0.25, 0.50, 0.28, 0.40, 0.31])
    b = Timing("b", [0.09, 0.15, 0.08, 0.14, 0.10, 0.16, 0.09])
    result = compare(a, b)
    assert result.high / result.low > TOO_WIDE and result.high < 1
    assert not result.too_noisy and result.verdict().startswith("b is ") and "x faster than a (" in result.verdict()


def test_the_ratio_interval_is_reproducible_and_covers_the_ratio_of_medians():
    a, b = [1.0, 1.1, 0.9, 1.05, 0.95], [2.0, 2.2, 1.8, 2.1, 1.9]
    assert ratio_interval(a, b) == ratio_interval(a, b)
    low, high = ratio_interval(a, b)
    assert low <= 2.0 <= high
    with pytest.raises(ValueError, match="at least one time"):
        ratio_interval([], b)


def test_per_step_is_the_median_and_quartiles_across_runs():
    rows = per_step([[1.0, 2.0, 3.0], [1.2, 2.2], [0.8, 1.8, 2.8]])
    assert len(rows) == 2  # as many steps as the shortest run
    assert rows[0][0] == 1.0 and rows[1][0] == 2.0 and rows[0][1] <= rows[0][0] <= rows[0][2]


def test_stopwatch_times_one_block():
    with Stopwatch() as watch:
        time.sleep(0.01)
    assert watch.seconds >= 0.01


# The one instrument: no other module reads a clock to time model work.
ALLOWED = {"kvlab/measure/timing.py": "the instrument"}
CLOCK = re.compile(r"time\.(perf_counter|time|monotonic|process_time)(_ns)?\b|default_timer")


def test_no_module_or_notebook_outside_the_instrument_reads_a_clock():
    sources = [*ROOT.glob("kvlab/**/*.py"), *ROOT.glob("bench/**/*.py"), *ROOT.glob("notebooks/**/*.py")]
    offenders = []
    for path in sources:
        relative = path.relative_to(ROOT).as_posix()
        if relative in ALLOWED:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if CLOCK.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, "time model work through kvlab.measure.timing:\n" + "\n".join(offenders)


def test_a_bound_that_would_print_as_one_gets_the_decimals_that_keep_it_off_one():
    a, b = Timing("a", [1.0] * 5), Timing("b", [1.16] * 5)
    slower = Comparison(a, b, ratio=1.16, low=1.003, high=1.30)
    assert slower.differs and slower.verdict() == "b is 1.16x slower than a (1.003-1.30)"  # not "(1.00-1.30)"
    faster = Comparison(a, b, ratio=1 / 1.16, low=1 / 1.30, high=1 / 1.003)
    assert faster.verdict() == "b is 1.16x faster than a (1.003-1.30)"
    near = Comparison(a, b, ratio=1.004, low=1.0004, high=1.009)
    assert near.verdict() == "b is 1.004x slower than a (1.0004-1.01)"  # the ratio too: never "1.00x slower"
    clear = Comparison(a, b, ratio=1.16, low=1.05, high=1.30)
    assert clear.verdict() == "b is 1.16x slower than a (1.05-1.30)"  # two decimals where they keep it off 1


def test_a_bound_too_near_one_to_write_is_no_difference():
    a, b = Timing("a", [1.0] * 5), Timing("b", [1.16] * 5)
    for low, high in ((1.00001, 1.30), (0.8, 0.99999), (1.0, 1.30)):  # the last touches 1
        result = Comparison(a, b, ratio=1.1 if low >= 1 else 0.9, low=low, high=high)
        assert not result.differs, (low, high)
        assert result.verdict().startswith("no difference beyond noise: b / a = "), result.verdict()
        assert "slower" not in result.verdict() and "faster" not in result.verdict()


def test_a_zero_time_reads_as_too_noisy_not_as_a_division_error():
    a, b = Timing("a", [1.0] * 5), Timing("b", [0.0] * 5)
    result = Comparison(a, b, ratio=0.0, low=0.0, high=0.0)
    assert result.as_dict()["too_noisy"] and result.verdict().startswith("too noisy to tell")
