"""Timing a generation: prefill and decode apart, repeats interleaved across configurations, medians.

`DecodeClock` is a generation streamer: transformers hands it the prompt, then each new token as it is chosen.
The first new token marks the end of the prefill, so decode speed excludes the prompt's forward pass.
"""

from __future__ import annotations

import statistics
import time


class DecodeClock:
    """A `generate(streamer=...)` that only timestamps: start, first new token, each later token."""

    def __init__(self):
        self.started = time.perf_counter()
        self.stamps: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # the first call carries the prompt
            self._prompt_seen = True
            return
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        self.ended = time.perf_counter()

    @property
    def prefill_seconds(self) -> float:
        return self.stamps[0] - self.started if self.stamps else float("nan")

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
