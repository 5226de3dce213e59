"""Two whole `generate` calls that take turns token by token, in two threads of this process: how `kvlab bench
--overhead` times plain against watched.

Why: on a shared virtual machine the speed of a core drifts by 5-10 % within seconds, so two whole runs timed one
after the other differ by more than the 1 % asked of watching (issue 41). Here each side hands the turn to the other
at every token (its streamer's `put`), so the two runs' steps alternate tens of milliseconds apart and a drift slower
than that weighs on both alike. Each side's time is the sum of the stretches it held the turn: its whole call (the
`with kvlab.watch` around `generate` included), cut at every token, nothing left out. One thread runs at a time,
and both run on one core where the system can pin threads: two cores of a virtual machine may run at different
speeds, and each thread would keep its own.

The plain side runs a second module tree over the same weights (`shared_weights_twin`): on the one model, the
watch's hooks would meet the plain side's forwards too. `bench/watch_lockstep.py` runs the same `Turns` in two
processes (their semaphores and flags shared between processes), to time one checkout of kvlab against another.
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
from collections.abc import Callable

from kvlab.measure.timing import DecodeClock, clock

PARTS = ("setup", "prefill", "decode", "end")  # what a finished side's slices add up to, in `parts`' order


def parts(slices: list[float]) -> tuple[float, float, float, float]:
    """A finished side's `Turns.slices` summed into `PARTS`: setup (the `with kvlab.watch` entry and generate's
    preparation, up to the prompt's `put`), the prefill, every later step, and the end (after the last token: the
    watch's exit)."""
    return slices[0], slices[1], sum(slices[2:-1]), slices[-1]


class Turns(DecodeClock):
    """A `generate(streamer=...)` that holds the turn while its side computes and hands it over at every `put`:
    `slices` are the stretches this side held it (setup up to the prompt's `put`, the prefill, one per later token,
    then the end), `seconds` their sum."""

    def __init__(self, mine: threading.Semaphore, other: threading.Semaphore, done: list[bool], index: int):
        super().__init__()
        self.mine, self.other, self.done, self.index = mine, other, done, index
        self.slices: list[float] = []
        self._since = self.started

    @property
    def seconds(self) -> float:
        return sum(self.slices)

    @property
    def prefill_seconds(self) -> float:
        """Up to the first new token, from this side's own turns (its stamps count the other side's too)."""
        return sum(self.slices[:2]) if self.stamps else float("nan")

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second after the first one, from this side's own turns, before `finish` and after."""
        decode = self.slices[2 : len(self.stamps) + 1]  # one per token after the first (the prompt's `put` first)
        return len(decode) / sum(decode) if decode and sum(decode) > 0 else float("nan")

    def put(self, value) -> None:
        super().put(value)
        self.slices.append(clock() - self._since)
        if not self.done[1 - self.index]:  # a side that has finished takes no more turns
            self.other.release()
            self.mine.acquire()
        self._since = clock()

    # `end()`, transformers' call as `generate` returns, is DecodeClock's: the side keeps the turn until `finish`,
    # after its `with kvlab.watch` block.

    def finish(self) -> None:
        """Stop timing; let the other side finish unless it already has (its last `put` waits on this side), so that
        no turn is left over."""
        self.slices.append(clock() - self._since)
        self.done[self.index] = True
        if not self.done[1 - self.index]:
            self.other.release()


def lockstep(sides: tuple[Callable, Callable], first: int = 0) -> list[tuple[object, Turns]]:
    """Run `sides[0](clock)` and `sides[1](clock)` in two threads taking turns at every token, `sides[first]`
    starting; each is handed its `Turns` to pass to `generate` as its streamer. Returns (what each returned, its
    turns), in `sides`' order. An error on either side stops both and is raised here."""
    sems = (threading.Semaphore(0), threading.Semaphore(0))
    done = [False, False]
    results: list = [None, None]
    errors: list[BaseException] = []
    pin = hasattr(os, "sched_getaffinity")
    core = min(os.sched_getaffinity(0)) if pin else None

    def run(index: int) -> None:
        if pin:
            os.sched_setaffinity(0, {core})  # this thread only (Linux): both sides on one core
        if index != first:
            sems[index].acquire()
        turns = Turns(sems[index], sems[1 - index], done, index)
        try:
            if not errors:  # the other side failed before this one began
                results[index] = (sides[index](turns), turns)
        except BaseException as err:  # handed to the caller, after both threads stopped
            errors.append(err)
        finally:
            turns.finish()

    threads = [threading.Thread(target=run, args=(i,), name=f"kvlab-lockstep-{i}") for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def shared_weights_twin(model):
    """A second module tree of `model` over the same parameters and buffers (no weight copied): hooks registered
    on one are not on the other."""
    memo = {id(tensor): tensor for tensor in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, memo)
