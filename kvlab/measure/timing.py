"""kvlab's one timing instrument: every time kvlab shows (notebooks, `kvlab bench`, the explorer) comes from here.

A single stopwatch reading on a shared laptop is noise: another process can triple it. So a time is always
(1) repeated, (2) interleaved with what it is compared to, so that drift and a busy neighbour hit both alike,
(3) reduced to a median with its spread (the interquartile range), and (4) compared as a ratio with a bootstrap
interval, so that a sentence can say "1.62x slower (1.55-1.70)" or "no difference beyond noise (0.97-1.04)".

The statistics are torch's own: each configuration's repeats become a `torch.utils.benchmark.Measurement` (median,
IQR). kvlab does not call `Timer.timeit`, because it runs the statement twice more as a warm-up on
every call: interleaving A and B one generation at a time would triple the cost of a notebook cell and, for
a statement that grows a cache, change what is measured. Instead each configuration is warmed up once, then
the repeats alternate A, B, A, B, ... and each call is timed with the same clock `Timer` uses
(`timeit.default_timer`). No other module of kvlab reads a clock to time model work (a test checks it).
"""

from __future__ import annotations

import statistics
import time
import timeit
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvlab.i18n import _, number

clock = timeit.default_timer  # the clock torch.utils.benchmark.Timer uses; the only one kvlab times work with


def wall_clock_ns() -> int:
    """Now, on the clock that stamps files (nanoseconds since the epoch): for the age of a file, never the
    duration of work (that is `clock`)."""
    return time.time_ns()


# An interval wider than this factor (high / low) says nothing a sentence could quote.
TOO_WIDE = 1.5
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


class NoisyTimingWarning(UserWarning):
    """The repeats disagree too much to tell a difference: run on a quieter machine, or with more repeats."""


class Stopwatch:
    """Times one block: `with Stopwatch() as watch: ...` then `watch.seconds`.

    For a single event a user waits on (a status line's "took 1.2 s", a first run's compile time), not for a
    comparison: comparisons go through `time_interleaved`, which repeats and interleaves.
    """

    def __enter__(self) -> Stopwatch:
        self.started = clock()
        self.seconds = float("nan")
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = clock() - self.started

    def elapsed(self) -> float:
        """Seconds since the block started (while it runs)."""
        return clock() - self.started


@dataclass
class Timing:
    """One configuration's repeated times (seconds per call, in run order), summarised by torch's `Measurement`."""

    label: str
    times: list[float]
    work: dict = field(default_factory=dict)  # optional counters of the work each call did (tokens, FLOPs...)

    @property
    def measurement(self):
        import torch
        from torch.utils.benchmark.utils import common

        spec = common.TaskSpec(
            stmt=self.label,
            setup="pass",
            label="kvlab",
            sub_label=self.label,
            description="median",
            num_threads=torch.get_num_threads(),
        )
        return common.Measurement(number_per_run=1, raw_times=list(self.times), task_spec=spec)

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

    @property
    def iqr(self) -> float:
        q1, q3 = self.quartiles
        return q3 - q1

    def describe(self, unit: str = "ms", scale: float = 1e3) -> str:
        """ "95.1 ms (IQR 93.8-97.0, 7 runs)", in the reader's language ("95,1 ms (IQR 93,8-97,0, 7 execuções)")."""
        q1, q3 = self.quartiles
        return _("{median} {unit} (IQR {q1}-{q3}, {runs} runs)").format(
            median=number(self.median * scale, 1),
            unit=unit,
            q1=number(q1 * scale, 1),
            q3=number(q3 * scale, 1),
            runs=len(self.times),
        )

    def as_dict(self) -> dict:
        q1, q3 = self.quartiles
        return {"label": self.label, "median_s": self.median, "q1_s": q1, "q3_s": q3, "times_s": list(self.times)}


def time_interleaved(
    runs: dict[str, Callable[[], object]],
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    before_each: Callable[[str], object] | None = None,
) -> dict[str, Timing]:
    """Time each callable `repeats` times, interleaved (A, B, A, B, ...), after `warmup` untimed calls each.

    `before_each(label)` runs untimed before every call (e.g. a fresh cache), so that only the work is timed.
    `threads` fixes torch's thread count for the whole measurement (torch's `Timer` does the same), so that
    the configurations compete on equal terms; None keeps the current setting.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}")
    if not runs:
        raise ValueError("time_interleaved needs at least one configuration to time")
    import torch
    from torch.utils.benchmark.utils import common

    times: dict[str, list[float]] = {label: [] for label in runs}
    with common.set_torch_threads(threads if threads is not None else torch.get_num_threads()):
        for label, run in runs.items():
            for _ in range(warmup):
                if before_each is not None:
                    before_each(label)
                run()
        for _, label in interleaved(list(runs), repeats):
            if before_each is not None:
                before_each(label)
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
        """True when the whole interval lies on one side of 1: a difference beyond noise."""
        return self.low > 1.0 or self.high < 1.0

    @property
    def too_noisy(self) -> bool:
        """True when the runs cannot support a sentence: under 3 repeats, or an interval that is wide *and*
        contains 1. A wide interval wholly on one side of 1 still tells the direction, and the verdict quotes the
        interval with it ("3.25x faster (2.85-4.07)"); calling that "too noisy" would hide a clear difference."""
        if not (self.low > 0) or min(len(self.a.times), len(self.b.times)) < 3:
            return True
        return not self.differs and self.high / self.low > TOO_WIDE

    def verdict(self) -> str:
        """A sentence a notebook can print as it is, in the reader's language: "static is 1.62x slower than
        dynamic (1.55-1.70)". The labels are the Timings' own, as the caller wrote them."""
        labels = {"b": self.b.label, "a": self.a.label}
        if self.ratio > 1 or self.too_noisy or not self.differs:
            ratio, interval = _ratio(self.ratio), _ratio_interval(self.low, self.high)
        else:  # faster: B / A below 1, said as A / B above 1
            ratio, interval = _ratio(1 / self.ratio), _ratio_interval(1 / self.high, 1 / self.low)
        if self.too_noisy:
            return _("too noisy to tell: {b} / {a} = {ratio} {interval}").format(
                **labels, ratio=ratio, interval=interval
            )
        if not self.differs:
            return _("no difference beyond noise: {b} / {a} = {ratio} {interval}").format(
                **labels, ratio=ratio, interval=interval
            )
        if self.ratio > 1:
            return _("{b} is {ratio}x slower than {a} {interval}").format(**labels, ratio=ratio, interval=interval)
        return _("{b} is {ratio}x faster than {a} {interval}").format(**labels, ratio=ratio, interval=interval)

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
    """A ratio of times as a verdict writes it: two decimals, the reader's decimal mark."""
    return number(value, 2, grouping=False)


def _ratio_interval(low: float, high: float) -> str:
    return f"({_ratio(low)}-{_ratio(high)})"


def compare(a: Timing, b: Timing, confidence: float = CONFIDENCE, seed: int = 0, warn: bool = True) -> Comparison:
    """B / A with a percentile-bootstrap interval of the ratio of medians (fixed seed: the same times give the
    same interval). Warns (`NoisyTimingWarning`) when the interval is too wide to say anything."""
    low, high = ratio_interval(a.times, b.times, confidence, seed)
    result = Comparison(a, b, b.median / a.median, low, high, confidence)
    if warn and result.too_noisy:
        warnings.warn(
            _(
                "timing too noisy to compare {b} with {a}: ratio {ratio} {interval} from {a_runs} and {b_runs} "
                "runs; repeat on a quieter machine or with more repeats"
            ).format(
                b=b.label,
                a=a.label,
                ratio=_ratio(result.ratio),
                interval=_ratio_interval(low, high),
                a_runs=len(a.times),
                b_runs=len(b.times),
            ),
            NoisyTimingWarning,
            stacklevel=2,
        )
    return result


def ratio_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE, seed: int = 0):
    """(low, high): the central `confidence` share of median(b*)/median(a*) over bootstrap resamples."""
    import numpy as np

    a_values, b_values = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_values.size == 0 or b_values.size == 0:
        raise ValueError("a ratio needs at least one time on each side")
    rng = np.random.default_rng(seed)
    a_medians = np.median(rng.choice(a_values, (BOOTSTRAP_RESAMPLES, a_values.size)), axis=1)
    b_medians = np.median(rng.choice(b_values, (BOOTSTRAP_RESAMPLES, b_values.size)), axis=1)
    ratios = b_medians / a_medians
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def per_step(runs: Sequence[Sequence[float]]) -> list[tuple[float, float, float]]:
    """(median, q1, q3) per step over repeated runs of the same steps (e.g. time per token at each position)."""
    steps = min((len(r) for r in runs), default=0)
    rows = []
    for s in range(steps):
        timing = Timing(str(s), [r[s] for r in runs])
        q1, q3 = timing.quartiles
        rows.append((timing.median, q1, q3))
    return rows


class DecodeClock:
    """A `generate(streamer=...)` that only timestamps: start, first new token, each later token.

    transformers hands a streamer the prompt, then each new token as it is chosen; the first new token marks
    the end of the prefill, so decode speed excludes the prompt's forward pass.
    """

    def __init__(self):
        self.started = clock()
        self.stamps: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # the first call carries the prompt
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
        """Seconds of each decode step (the gaps between consecutive new tokens)."""
        return [b - a for a, b in zip(self.stamps, self.stamps[1:])]

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second after the first one (each needs one forward through the cache)."""
        if len(self.stamps) < 2:
            return float("nan")
        return (len(self.stamps) - 1) / (self.stamps[-1] - self.stamps[0])


def median(values) -> float:
    values = [v for v in values if v == v]  # drop NaN
    return statistics.median(values) if values else float("nan")


def interleaved(labels: list[str], repeats: int) -> list[tuple[int, str]]:
    """(repeat, label) in run order: every configuration once per repeat, so drift hits all of them alike."""
    return [(r, label) for r in range(repeats) for label in labels]
