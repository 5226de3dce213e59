"""kvlab's one timing instrument: every time kvlab shows comes from here.

One stopwatch reading on a shared machine is noise, so a time is repeated, interleaved with what it is compared to
(drift hits both alike), reduced to a median and interquartile range, and compared as a ratio with a bootstrap
interval: "1.62x slower (1.55-1.70)" or "no difference beyond noise (0.97-1.04)". Not `torch.utils.benchmark.Timer`:
its per-call warm-up would triple the cost of interleaving one generation at a time and change what a growing cache
measures. No other module of kvlab reads a clock to time model work (a test checks it).
"""

from __future__ import annotations

import math
import statistics
import time
import timeit
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvlab.i18n import _, number

RATIO_DECIMALS = 2  # a ratio is written 1.62x, and its interval (1.55-1.70)...
MOST_RATIO_DECIMALS = 4  # ...with more decimals only where a bound would print as 1: (1.003-1.30), never (1.00-1.30)
clock = timeit.default_timer  # the clock torch.utils.benchmark.Timer uses; the only one kvlab times work with


def wall_clock_ns() -> int:
    """Nanoseconds since the epoch, the clock that stamps files: for a file's age, never a duration of work."""
    return time.time_ns()


TOO_WIDE = 1.5  # an interval wider than this factor (high / low) says nothing a sentence could quote
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


class NoisyTimingWarning(UserWarning):
    """The repeats disagree too much to tell a difference: run on a quieter machine, or with more repeats."""


class Stopwatch:
    """Times one block (`with Stopwatch() as watch: ...`, then `watch.seconds`): for a single event a user waits
    on; comparisons go through `time_interleaved`."""

    def __enter__(self) -> Stopwatch:
        self.started = clock()
        self.seconds = float("nan")
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = clock() - self.started

    def elapsed(self) -> float:  # while the block runs
        return clock() - self.started


@dataclass
class Timing:
    """One configuration's repeated times: seconds per call, in run order."""

    label: str
    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def quartiles(self) -> tuple[float, float]:
        """(q1, q3) of the times; equal to the median when there is one repeat."""
        if len(self.times) < 2:
            return (self.median, self.median)
        q = statistics.quantiles(self.times, n=4, method="inclusive")
        return (q[0], q[2])

    def describe(self, unit: str = "ms", scale: float = 1e3) -> str:
        """ "95.1 ms (IQR 93.8-97.0, 7 runs)", in the reader's language ("95,1 ms (IQR 93,8-97,0, 7 execuções)")."""
        median, q1, q3 = (number(value * scale, 1) for value in (self.median, *self.quartiles))
        runs = len(self.times)
        return _("{median} {unit} (IQR {q1}-{q3}, {runs} runs)").format(
            median=median, unit=unit, q1=q1, q3=q3, runs=runs
        )

    def as_dict(self) -> dict:
        q1, q3 = self.quartiles
        return {"label": self.label, "median_s": self.median, "q1_s": q1, "q3_s": q3, "times_s": list(self.times)}


def check_one_prompt(input_ids) -> None:
    """The timing functions time one sequence at a time: `input_ids` is (1, prompt_tokens)."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(
            _("input_ids must have shape (1, prompt_tokens); got {shape}").format(shape=tuple(input_ids.shape))
        )


def time_interleaved(
    runs: dict[str, Callable[[], object]],
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    before_each: Callable[[str], object] | None = None,
) -> dict[str, Timing]:
    """Time each callable `repeats` times, interleaved (A, B, A, B, ...), after `warmup` untimed calls each.

    `before_each(label)` runs untimed before every call (e.g. a fresh cache). `threads` fixes torch's thread count
    for the whole measurement, so the configurations compete on equal terms; None keeps the current setting.
    """
    if repeats < 1:
        raise ValueError(_("repeats must be at least 1; got {repeats}").format(repeats=repeats))
    if not runs:
        raise ValueError(_("time_interleaved needs at least one configuration to time"))
    import torch
    from torch.utils.benchmark.utils import common

    prepare = before_each or (lambda label: None)
    times: dict[str, list[float]] = {label: [] for label in runs}
    with common.set_torch_threads(threads if threads is not None else torch.get_num_threads()):
        for label, run in runs.items():
            for _warmup in range(warmup):
                prepare(label)
                run()
        for _round, label in interleaved(list(runs), repeats):
            prepare(label)
            started = clock()
            runs[label]()
            times[label].append(clock() - started)
    return {label: Timing(label, values) for label, values in times.items()}


@dataclass
class Comparison:
    """B against A: the ratio of medians (B / A) and its bootstrap interval."""

    a: Timing
    b: Timing
    ratio: float
    low: float
    high: float
    confidence: float = CONFIDENCE

    @property
    def differs(self) -> bool:
        """True when the whole interval lies on one side of 1, far enough that its bound nearest 1 prints apart
        from 1 (`MOST_RATIO_DECIMALS`): a difference beyond noise, never "slower (1.00-1.30)"."""
        _value, low, _high = self._as_said()  # low: the bound nearest 1, once said above 1
        return low > 1.0 and _apart_from_one(low) is not None

    def _as_said(self) -> tuple[float, float, float]:
        """(ratio, low, high) as the verdict says them: B / A, or A / B when B is the faster (the ratio above 1)."""
        if self.high < 1.0:
            ratio, low, high = (1 / v if v > 0 else math.inf for v in (self.ratio, self.high, self.low))
            return ratio, low, high
        return self.ratio, self.low, self.high

    @property
    def too_noisy(self) -> bool:
        """Under 3 repeats, or an interval that is wide *and* contains 1: a wide interval wholly on one side of 1
        still tells the direction, and the verdict quotes it ("3.25x faster (2.85-4.07)")."""
        if not (self.low > 0) or min(len(self.a.times), len(self.b.times)) < 3:
            return True
        return not self.differs and self.high / self.low > TOO_WIDE

    def verdict(self) -> str:
        """ "static is 1.62x slower than dynamic (1.55-1.70)", in the reader's language, with the Timings' labels."""
        ratio, interval = _ratio(self.ratio), _ratio_interval(self.low, self.high)
        if self.too_noisy:
            sentence = _("too noisy to tell: {b} / {a} = {ratio} {interval}")
        elif not self.differs:
            sentence = _("no difference beyond noise: {b} / {a} = {ratio} {interval}")
        else:  # B / A below 1 is said as A / B above 1; each number with the decimals that keep it off 1
            slower = self.low > 1.0
            sentence = (
                _("{b} is {ratio}x slower than {a} {interval}")
                if slower
                else _("{b} is {ratio}x faster than {a} {interval}")
            )
            value, low, high = self._as_said()
            ratio, interval = _off_one(value), f"({_off_one(low)}-{_off_one(high)})"
        return sentence.format(b=self.b.label, a=self.a.label, ratio=ratio, interval=interval)

    def as_dict(self) -> dict:
        return {
            "a": self.a.as_dict(),
            "b": self.b.as_dict(),
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "differs": self.differs,
            "too_noisy": self.too_noisy,
            "verdict": self.verdict(),
        }


def _ratio(value: float) -> str:
    return number(value, RATIO_DECIMALS, grouping=False)


def _ratio_interval(low: float, high: float) -> str:
    return f"({_ratio(low)}-{_ratio(high)})"


def _apart_from_one(value: float) -> int | None:
    """The fewest decimals (2 or more) at which `value` prints as other than 1: 1.003 takes 3 ("1.003", where 2
    would write "1.00", read as touching 1). None when `MOST_RATIO_DECIMALS` still write it as 1."""
    return next((d for d in range(RATIO_DECIMALS, MOST_RATIO_DECIMALS + 1) if round(value, d) != 1.0), None)


def _off_one(value: float) -> str:
    """A ratio of a difference, in as many decimals as keep it off 1: "1.16", "1.003"."""
    return number(value, _apart_from_one(value) or MOST_RATIO_DECIMALS, grouping=False)


def compare(a: Timing, b: Timing, confidence: float = CONFIDENCE, seed: int = 0, warn: bool = True) -> Comparison:
    """B / A with a percentile-bootstrap interval of the ratio of medians (fixed seed: same times, same interval).
    Warns (`NoisyTimingWarning`) when the interval is too wide to say anything."""
    low, high = ratio_interval(a.times, b.times, confidence, seed)
    result = Comparison(a, b, b.median / a.median, low, high, confidence)
    if warn and result.too_noisy:
        ratio, interval, a_runs, b_runs = _ratio(result.ratio), _ratio_interval(low, high), len(a.times), len(b.times)
        message = _(
            "timing too noisy to compare {b} with {a}: ratio {ratio} {interval} from {a_runs} and {b_runs} "
            "runs; repeat on a quieter machine or with more repeats"
        ).format(b=b.label, a=a.label, ratio=ratio, interval=interval, a_runs=a_runs, b_runs=b_runs)
        warnings.warn(message, NoisyTimingWarning, stacklevel=2)
    return result


def ratio_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE, seed: int = 0):
    """(low, high): the central `confidence` share of median(b*)/median(a*) over bootstrap resamples."""
    import numpy as np

    a_values, b_values = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_values.size == 0 or b_values.size == 0:
        raise ValueError(_("a ratio needs at least one time on each side"))
    rng = np.random.default_rng(seed)
    a_medians, b_medians = (
        np.median(rng.choice(v, (BOOTSTRAP_RESAMPLES, v.size)), axis=1) for v in (a_values, b_values)
    )
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(b_medians / a_medians, [tail, 100 - tail])
    return float(low), float(high)


def paired_ratio(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE, seed: int = 0):
    """(median, low, high) of the pairwise ratios b[i] / a[i], the interval a percentile bootstrap of their median:
    for runs taken in pairs, side by side, where drift between pairs cancels inside each ratio."""
    import numpy as np

    ratios = np.asarray(b, dtype=float) / np.asarray(a, dtype=float)
    if ratios.size == 0:
        raise ValueError(_("a ratio needs at least one time on each side"))
    medians = np.median(np.random.default_rng(seed).choice(ratios, (BOOTSTRAP_RESAMPLES, ratios.size)), axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(np.median(ratios)), float(low), float(high)


def per_step(runs: Sequence[Sequence[float]]) -> list[tuple[float, float, float]]:
    """(median, q1, q3) per step over repeated runs of the same steps (e.g. time per token at each position)."""
    steps = min((len(r) for r in runs), default=0)
    timings = [Timing(str(s), [r[s] for r in runs]) for s in range(steps)]
    return [(t.median, *t.quartiles) for t in timings]


class DecodeClock:
    """A `generate(streamer=...)` that only timestamps: start, first new token (the prefill's end), each later one."""

    def __init__(self):
        self.started = clock()
        self.stamps: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # transformers hands a streamer the prompt first
            self._prompt_seen = True
            return
        self.stamps.append(clock())

    def end(self) -> None:
        self.ended = clock()

    @property
    def prefill_seconds(self) -> float:
        return self.stamps[0] - self.started if self.stamps else float("nan")

    @property
    def step_seconds(self) -> list[float]:
        return [b - a for a, b in zip(self.stamps, self.stamps[1:])]

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second after the first one: decoding, the prefill left out."""
        if len(self.stamps) < 2:
            return float("nan")
        return (len(self.stamps) - 1) / (self.stamps[-1] - self.stamps[0])


def median(values) -> float:
    values = [v for v in values if v == v]  # drop NaN
    return statistics.median(values) if values else float("nan")


def interleaved(labels: list[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, label) in run order: every configuration once per repeat, so drift hits all of them alike."""
    return [(r, label) for r in range(repeats) for label in labels]
