"""Where watching's time goes, inside the run: kvlab's own code timed in place during whole `generate` calls (SmolLM2,
greedy, one thread), against the same calls plain.

Why beside the whole-run pairs of `bench/watch_cost.py`: those give the figure a user pays, but their interval is
about half a percent wide, wider than any one part of recording, so they cannot say which part a change made
cheaper. Here each part is timed where it runs, right after a decoder layer's weights swept the CPU caches (a replay
apart from the model sees less than half of it, issue 41):

- `update`: the instrumented cache's `update` (kvlab's wrapper around transformers' own) less transformers' `update`
  inside it: the wrapper's time, the frame and the step bookkeeping (none where a watched `DynamicCache` runs its
  forwards with transformers' own `update`, `kvlab.caches.forward_read`: its layers are read in the flush);
- `flush`: `Recorder.flush`, the step's layers read and their events logged (`Recorder.defer`);
- `hooks`: the watch's forward pre- and post-hooks, less the flush the post-hook runs.

Their sum over the plain run's time is the share watching adds; on 2026-12-07 it matched the whole-run ratio at
128 + 32. The timers cost a little themselves (two clock reads a call), inside `update` more than elsewhere: read
the parts against each other and a change before and after, not as exact absolute costs.

    .venv/bin/python bench/watch_direct.py                       # 128+32 and 16+512, SmolLM2, 8 runs a side
    .venv/bin/python bench/watch_direct.py --lengths 128+32 --runs 16
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared part of the whole-run scripts

from whole_run import Side, whole_run_parser, write_rows

from kvlab.measure.timing import clock

PARTS = ("update", "flush", "hooks")


class Timers:
    """Seconds spent in the methods `wrap` replaced, summed by name until `reset`."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self._replaced: list[tuple[type, str, Callable]] = []

    def wrap(self, owner: type, method: str, name: str) -> None:
        """Replace `owner.method` (its own, not an inherited one) by a call that adds its time to `name`."""
        inner: Callable = owner.__dict__[method]
        seconds = self.seconds

        def timed(*args, **kwargs):
            started = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                seconds[name] += clock() - started

        self._replaced.append((owner, method, inner))
        setattr(owner, method, timed)

    def remove(self) -> None:
        """Put every method `wrap` replaced back."""
        while self._replaced:
            owner, method, inner = self._replaced.pop()
            setattr(owner, method, inner)

    def reset(self) -> dict[str, float]:
        taken = dict(self.seconds)
        self.seconds.clear()
        return taken


def install(timers: Timers) -> None:
    """Time transformers' `update`, kvlab's wrapper of it, the flush and the watch's hooks."""
    from kvlab import _compat
    from kvlab.caches.base import InstrumentedCacheMixin
    from kvlab.recording.recorder import Recorder
    from kvlab.watcher import Watch

    owner = next(c for c in _compat.DynamicCache.__mro__ if "update" in c.__dict__)  # transformers' own update
    timers.wrap(owner, "update", "transformers_update")
    timers.wrap(InstrumentedCacheMixin, "update", "kvlab_update")
    timers.wrap(Recorder, "flush", "flush")
    timers.wrap(Watch, "_before_forward", "pre_hook")
    timers.wrap(Watch, "_after_forward", "post_hook")


def parts(watched: dict[str, float]) -> dict[str, float]:
    """The seconds of each part of `PARTS` in one watched run, from its timers."""
    flush = watched.get("flush", 0.0)
    return {
        # transformers' update, timed inside kvlab's wrapper: a forward read after it ended meets neither timer
        "update": watched.get("kvlab_update", 0.0) - watched.get("transformers_update", 0.0),
        "flush": flush,
        # the post-hook flushes the forward's deferred updates: counted once, as the flush
        "hooks": watched.get("pre_hook", 0.0) + watched.get("post_hook", 0.0) - flush,
    }


def breakdown(side: Side, new: int, runs: int, timers: Timers) -> dict:
    """`runs` plain and `runs` watched generations, alternating; each part's median milliseconds per run, and their
    sum's share of the plain run's median time."""
    plain_s, by_part = [], defaultdict(list)
    tokens = set()
    for _ in range(runs):
        timers.reset()
        started = clock()
        plain_tokens, _ = side.generate(False, new)
        plain_s.append(clock() - started)
        timers.reset()  # the plain run's transformers' update: not a part of watching
        watched_tokens, _ = side.generate(True, new)
        for part, seconds in parts(timers.reset()).items():
            by_part[part].append(seconds)
        tokens.update((tuple(plain_tokens), tuple(watched_tokens)))
    plain_ms = 1e3 * statistics.median(plain_s)
    ms = {part: 1e3 * statistics.median(by_part[part]) for part in PARTS}
    totals = [sum(by_part[part][i] for part in PARTS) for i in range(runs)]
    return {
        "runs": runs,
        "plain_ms": plain_ms,
        "parts_ms": ms,
        "total_ms": 1e3 * statistics.median(totals),
        "share": 1e3 * statistics.median(totals) / plain_ms,
        "same_tokens": len(tokens) == 1,
    }


def line(prompt: int, new: int, row: dict) -> str:
    parts_text = ", ".join(f"{part} {ms:.2f}" for part, ms in row["parts_ms"].items())
    return (
        f"{prompt} + {new} tokens, kvlab's own time in a watched run (median of {row['runs']}, ms): {parts_text}; "
        f"total {row['total_ms']:.2f} = {row['share']:.2%} of a plain run ({row['plain_ms']:.0f} ms); "
        f"same tokens: {row['same_tokens']}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = whole_run_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="runs of each side per length (default 8)")
    args = parser.parse_args(argv)
    timers = Timers()
    install(timers)
    rows = []
    try:
        for prompt, new in args.lengths:
            side = Side(args.model, prompt)  # loads and warms up; the timers run through it and are reset first
            row = breakdown(side, new, args.runs, timers) | {"prompt_tokens": prompt, "new_tokens": new}
            print(line(prompt, new, row), flush=True)
            rows.append(row)
    finally:
        timers.remove()
    write_rows(args.output, args.model, rows)


if __name__ == "__main__":
    main()
