"""What watching costs on the whole run, with the two runs taking turns token by token: plain `generate` in one
process and the same call inside `kvlab.watch` in another (SmolLM2, greedy, one thread each), in lockstep.

Why lockstep: on a shared virtual machine the speed of a core drifts by 5-10 % within seconds, so two whole runs
timed one after the other differ by more than the 1 % asked of watching, and a pair of 16 + 512 tokens takes over a
minute, so a hundred pairs are out of reach. `kvlab bench --overhead` takes the same turns (`kvlab.bench.lockstep`)
in two threads of one process; this script takes them in two processes, so that each side may import its own
kvlab (`--against`), and every turn also switches address space. Here each process hands the turn
to the other at every token (at the streamer's `put`), so the two runs' steps alternate some 40 ms apart and any
drift slower than that weighs on both alike. Each side's time is the sum of its own turns: from the moment it gets
the turn to the moment it hands it over, the whole `generate` call (and the `with kvlab.watch` around it) cut into
1 + new-token slices, nothing left out. Only one process runs at a time, both pinned to one core.

Each lockstep pair gives one ratio, watched / plain; the sides take turns going first from pair to pair, and the
figure is the median of the pairs' ratios with a 95 % bootstrap interval (`kvlab.measure.timing.paired_ratio`).

A change to recording is measured the same way against the code before it: `--against DIR` runs the watched call
of the kvlab in DIR (a checkout of the earlier commit, e.g. a `git worktree`) in lockstep with this one's, and the
ratio is this / DIR's.

Its floor is wider than 1 %: each process loads its own copy of the weights, and where each copy lands in memory
can favour one side for a whole run. `--against` a checkout of the very same commit (an A/A) read 0.9941x
(0.9920-0.9996, 5 pairs, 16 + 512) on 2026-12-07, where `kvlab bench --overhead`, whose two sides share one copy of
the weights, reads 1 within its interval (bench/watch_cost.py prints that floor). So issue 41's yardstick is
`bench/watch_cost.py --only overhead`; this script gives the per-part breakdown, and A/B answers only for changes
larger than its floor.

    OMP_NUM_THREADS=1 .venv/bin/python bench/watch_lockstep.py                  # 128+32 and 16+512, SmolLM2
    OMP_NUM_THREADS=1 .venv/bin/python bench/watch_lockstep.py --lengths 16+512 --pairs 9 --output FILE.json
    git worktree add /tmp/before HEAD~1
    OMP_NUM_THREADS=1 .venv/bin/python bench/watch_lockstep.py --against /tmp/before --lengths 128+32
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared part of the whole-run scripts

from whole_run import Side, whole_run_parser, write_rows

# (label, watched, the directory kvlab is imported from: None for this process's own)
PLAIN_AND_WATCHED = (("plain", False, None), ("watched", True, None))


def turns_class(kvlab_dir: str | None) -> type:
    """`kvlab.bench.lockstep.Turns` of this checkout, on top of the kvlab imported from `kvlab_dir` where given (an
    earlier checkout, `--against`, which may not have that module): nothing of kvlab is imported before, and both
    sides take turns the same way."""
    if kvlab_dir is not None:
        sys.path.insert(0, kvlab_dir)
    import importlib.util

    import kvlab

    if kvlab_dir is not None and not Path(kvlab.__file__).resolve().is_relative_to(Path(kvlab_dir).resolve()):
        raise RuntimeError(f"kvlab was imported from {kvlab.__file__}, not from {kvlab_dir}")
    path = Path(__file__).resolve().parents[1] / "kvlab" / "bench" / "lockstep.py"
    spec = importlib.util.spec_from_file_location("kvlab_lockstep_turns", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its `kvlab.measure.timing` is the side's own kvlab's
    return module.Turns


def side(index: int, spec: tuple, model_name: str, prompt: int, new: int, pairs: int, sync: tuple) -> None:
    """One process: load and warm up (`Side`), then `pairs` runs in lockstep with the other side, the first side
    going first on even pairs. `spec`: (label, watched, the directory to import kvlab from). `sync`: both sides'
    semaphores (one per side, the turn), the done flags of the pair, a barrier between pairs, the queue the results
    go to, and the core both run on. One core for both, since only one runs at a time: on two cores, each side would
    keep its own for the whole run, and the hypervisor may give two cores different speeds. A side that fails aborts
    the barrier and frees both turns, so the other stops too."""
    label, watched, kvlab_dir = spec
    sems, done, barrier, results, core = sync
    try:
        if core is not None:
            os.sched_setaffinity(0, {core})
        turns_type = turns_class(kvlab_dir)
        run = Side(model_name, prompt)
        mine, other = sems[index], sems[1 - index]
        for pair in range(pairs):
            barrier.wait()
            if index == 0:
                done[0] = done[1] = 0
                if any(sem.acquire(False) for sem in sems):  # both finished: no turn may be left over
                    raise RuntimeError("a turn was left over after a pair: the two sides would run at once")
            barrier.wait()
            first = (pair % 2 == 0) == (index == 0)
            if not first:
                mine.acquire()
            turns = turns_type(mine, other, done, index)
            tokens, _ = run.generate(watched, new, clock=turns)
            turns.finish()
            results.put({"side": label, "pair": pair, "slices": turns.slices, "tokens": tokens})
    except BaseException:
        barrier.abort()
        for sem in sems:  # a side waiting for its turn would wait forever
            sem.release()
        raise


def breakdown(first: list[list[float]], second: list[list[float]]) -> dict:
    """Where the second side's extra time falls, per part of the run (`kvlab.bench.lockstep.parts`). Each part: the
    first side's median milliseconds and the median over pairs of second - first."""
    import statistics

    from kvlab.bench.lockstep import PARTS, parts  # here, not at the top: a side imports its own kvlab first

    split_first, split_second = [parts(s) for s in first], [parts(s) for s in second]
    return {
        part: {
            "first_ms": 1e3 * statistics.median(f[i] for f in split_first),
            "added_ms": 1e3 * statistics.median(s[i] - f[i] for f, s in zip(split_first, split_second)),
        }
        for i, part in enumerate(PARTS)
    }


def lockstep(
    model_name: str, prompt: int, new: int, pairs: int, core: int | None = None, sides: tuple = PLAIN_AND_WATCHED
) -> dict:
    """`pairs` lockstep runs of the two `sides` (`PLAIN_AND_WATCHED` by default): every pair's seconds per side, the
    median ratio second / first and its interval, where the second side's extra time falls (`breakdown`), and whether
    every run gave the same tokens. Both sides run on `core` (default: the first this process may use; none where
    the system cannot pin a process)."""
    from kvlab.measure.timing import paired_ratio

    if core is None and hasattr(os, "sched_getaffinity"):
        core = min(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    sems = (context.Semaphore(0), context.Semaphore(0))
    done = context.Array("b", 2)
    barrier, results = context.Barrier(2), context.Queue()
    sync = (sems, done, barrier, results, core)
    processes = [
        context.Process(target=side, args=(i, spec, model_name, prompt, new, pairs, sync))
        for i, spec in enumerate(sides)
    ]
    for process in processes:
        process.start()
    rows: list[dict] = []
    while len(rows) < 2 * pairs:
        try:
            rows.append(results.get(timeout=5))
        except queue.Empty:  # a side that died sends nothing more: stop both rather than wait forever
            failed = [process.exitcode for process in processes if process.exitcode not in (None, 0)]
            if failed:
                for process in processes:
                    process.kill()
                raise RuntimeError(f"a lockstep side failed (exit {failed[0]})") from None
    for process in processes:
        process.join()
    labels = [label for label, _, _ in sides]
    by_pair = sorted(rows, key=lambda r: r["pair"])
    slices = {label: [r["slices"] for r in by_pair if r["side"] == label] for label in labels}
    seconds = {label: [sum(each) for each in slices[label]] for label in labels}
    ratio, low, high = paired_ratio(seconds[labels[0]], seconds[labels[1]])
    return {
        "prompt_tokens": prompt,
        "new_tokens": new,
        "pairs": pairs,
        "core": core,
        "sides": {label: {"watched": watched, "kvlab": kvlab_dir} for label, watched, kvlab_dir in sides},
        "seconds": seconds,
        "ratio": ratio,
        "interval": [low, high],
        "breakdown": breakdown(slices[labels[0]], slices[labels[1]]),
        "same_tokens": all(r["tokens"] == rows[0]["tokens"] for r in rows),
    }


def line(row: dict) -> str:
    first, second = row["sides"]
    low, high = row["interval"]
    return (
        f"{row['prompt_tokens']} + {row['new_tokens']} tokens, whole run in lockstep, {second} / {first}: "
        f"{row['ratio']:.4f}x (95% interval {low:.4f}-{high:.4f}, {row['pairs']} pairs); "
        f"same tokens: {row['same_tokens']}\n  {second} - {first}, median ms per part: "
        + ", ".join(f"{part} {b['added_ms']:+.2f} of {b['first_ms']:.1f}" for part, b in row["breakdown"].items())
    )


def main(argv: list[str] | None = None) -> int:
    parser = whole_run_parser("Plain and watched generate in lockstep, token by token.")
    parser.add_argument("--pairs", type=int, default=7, help="lockstep pairs per length (default 7, at least 3)")
    parser.add_argument(
        "--against",
        metavar="DIR",
        help="time watched runs of this kvlab against those of the kvlab in DIR (an earlier checkout): after / before",
    )
    args = parser.parse_args(argv)
    if args.pairs < 3:
        parser.error(f"--pairs N (N >= 3, for an interval); got {args.pairs}")
    sides = PLAIN_AND_WATCHED
    if args.against is not None:
        if not (Path(args.against) / "kvlab" / "__init__.py").is_file():
            parser.error(f"--against DIR: a checkout of kvlab (DIR/kvlab/__init__.py); got {args.against}")
        sides = (("before", True, str(Path(args.against).resolve())), ("after", True, None))
    rows = []
    for prompt, new in args.lengths:
        rows.append(lockstep(args.model, prompt, new, args.pairs, sides=sides))
        print(line(rows[-1]), flush=True)
    write_rows(args.output, args.model, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
