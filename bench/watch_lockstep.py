"""What watching costs on the whole run, with the two runs taking turns token by token: plain `generate` in one
process and the same call inside `kvlab.watch` in another (SmolLM2, greedy, one thread each), in lockstep.

Why lockstep: on a shared virtual machine the speed of a core drifts by 5-10 % within seconds, so two whole runs
timed one after the other (`kvlab bench --overhead`'s pairs) differ by more than the 1 % asked of watching, and a
pair of 16 + 512 tokens takes over a minute, so a hundred pairs are out of reach. Here each process hands the turn
to the other at every token (at the streamer's `put`), so the two runs' steps alternate some 40 ms apart and any
drift slower than that weighs on both alike. Each side's time is the sum of its own turns: from the moment it gets
the turn to the moment it hands it over, the whole `generate` call (and the `with kvlab.watch` around it) cut into
1 + new-token slices, nothing left out. Only one process runs at a time, both pinned to one core.

Each lockstep pair gives one ratio, watched / plain; the sides take turns going first from pair to pair, and the
figure is the median of the pairs' ratios with a 95 % bootstrap interval (`kvlab.measure.timing.paired_ratio`).

    OMP_NUM_THREADS=1 .venv/bin/python bench/watch_lockstep.py                  # 128+32 and 16+512, SmolLM2
    OMP_NUM_THREADS=1 .venv/bin/python bench/watch_lockstep.py --lengths 16+512 --pairs 9 --output FILE.json
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script's options

from watch_instructions import whole_run_parser, write_rows

SIDES = ("plain", "watched")


class Turns:
    """A `generate(streamer=...)` that holds the turn while its process computes and hands it over at every `put`:
    `seconds` sums the slices this side held it."""

    def __init__(self, mine, other, done, index: int):
        from kvlab.measure.timing import clock

        self.clock, self.mine, self.other, self.done, self.index = clock, mine, other, done, index
        self.seconds = 0.0
        self.started = clock()

    def put(self, value) -> None:
        self.seconds += self.clock() - self.started
        self.other.release()
        self.mine.acquire()
        self.started = self.clock()

    def end(self) -> None:
        """transformers' call as `generate` returns: this side keeps the turn until `finish`, after the `with
        kvlab.watch` block (handing it over here too would leave the other side a turn too many, and from the next
        pair on both would run at once)."""

    def finish(self) -> None:
        """Stop timing; let the other side finish unless it already has (its last `put` waits on this side)."""
        self.seconds += self.clock() - self.started
        with self.done.get_lock():
            self.done[self.index] = 1
            other_done = self.done[1 - self.index]
        if not other_done:
            self.other.release()


def side(index: int, model_name: str, prompt: int, new: int, pairs: int, sync: tuple) -> None:
    """One process: load, warm up (plain and watched, 2 tokens each), then `pairs` runs in lockstep with the other
    side, going first on even pairs when it is the plain side. `sync`: both sides' semaphores (one per side, the
    turn), the done flags of the pair, a barrier between pairs, the queue the results go to, and the core both run
    on. One core for both, since only one runs at a time: on two cores, each side would keep its own for the whole
    run, and the hypervisor may give two cores different speeds."""
    sems, done, barrier, results, core = sync
    if core is not None:
        os.sched_setaffinity(0, {core})
    import torch

    import kvlab
    from kvlab.bench.configs import BenchConfig
    from kvlab.bench.runner import generate_once
    from kvlab.measure.text import token_windows
    from kvlab.recorded_run import pad_token_id

    torch.set_num_threads(1)
    model, tokenizer = kvlab.load(model_name)
    ids = token_windows(tokenizer, prompt, 1, 0)[0]  # (1, prompt)
    plain = BenchConfig("plain", "dynamic", plain=True)
    watched = SIDES[index] == "watched"
    for warm in (False, True):
        if warm:
            with kvlab.watch(model):
                generate_once(model, tokenizer, plain, ids, 2)
        else:
            generate_once(model, tokenizer, plain, ids, 2)
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
        turns = Turns(mine, other, done, index)
        tokens = _generate(model, ids, new, turns, watched, pad_token_id(tokenizer, model))
        turns.finish()
        results.put({"side": SIDES[index], "pair": pair, "first": first, "seconds": turns.seconds, "tokens": tokens})


def _generate(model, ids, new: int, turns: Turns, watched: bool, pad: int) -> list[int]:
    """`generate_once`'s plain call (transformers' own DynamicCache), with `turns` as its streamer."""
    import contextlib

    import torch

    from kvlab import _compat, watch

    cache = _compat.DynamicCache(config=model.config)
    with watch(model) if watched else contextlib.nullcontext(), torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=pad,
            streamer=turns,
            **{_compat.CACHE_KWARG: cache},
        )
    return out[0, ids.shape[-1] :].tolist()


def lockstep(model_name: str, prompt: int, new: int, pairs: int, core: int | None = None) -> dict:
    """`pairs` lockstep runs of plain and watched `generate`: every pair's seconds per side, the median ratio and its
    interval, and whether every run gave the same tokens. Both sides run on `core` (default: the first this process
    may use; none where the system cannot pin a process)."""
    from kvlab.measure.timing import paired_ratio

    if core is None and hasattr(os, "sched_getaffinity"):
        core = min(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    sems = (context.Semaphore(0), context.Semaphore(0))
    done = context.Array("b", 2)
    barrier, results = context.Barrier(2), context.Queue()
    processes = [
        context.Process(target=side, args=(i, model_name, prompt, new, pairs, (sems, done, barrier, results, core)))
        for i in range(2)
    ]
    for process in processes:
        process.start()
    rows = [results.get() for _ in range(2 * pairs)]
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a lockstep side failed (exit {process.exitcode})")
    seconds = {s: [r["seconds"] for r in sorted(rows, key=lambda r: r["pair"]) if r["side"] == s] for s in SIDES}
    ratio, low, high = paired_ratio(seconds["plain"], seconds["watched"])
    return {
        "prompt_tokens": prompt,
        "new_tokens": new,
        "pairs": pairs,
        "core": core,
        "plain_s": seconds["plain"],
        "watched_s": seconds["watched"],
        "ratio": ratio,
        "interval": [low, high],
        "same_tokens": all(r["tokens"] == rows[0]["tokens"] for r in rows),
    }


def line(row: dict) -> str:
    low, high = row["interval"]
    return (
        f"{row['prompt_tokens']} + {row['new_tokens']} tokens, whole run in lockstep, watched / plain: "
        f"{row['ratio']:.4f}x (95% interval {low:.4f}-{high:.4f}, {row['pairs']} pairs); "
        f"same tokens: {row['same_tokens']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = whole_run_parser("Plain and watched generate in lockstep, token by token.")
    parser.add_argument("--pairs", type=int, default=7, help="lockstep pairs per length (default 7, at least 3)")
    args = parser.parse_args(argv)
    if args.pairs < 3:
        parser.error(f"--pairs N (N >= 3, for an interval); got {args.pairs}")
    rows = []
    for prompt, new in args.lengths:
        rows.append(lockstep(args.model, prompt, new, args.pairs))
        print(line(rows[-1]), flush=True)
    write_rows(args.output, args.model, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
