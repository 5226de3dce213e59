"""What watching costs, counted: the instructions of the whole run of plain `generate` and of the same call inside
`kvlab.watch` (SmolLM2, greedy, one thread), each side in its own process under valgrind's cachegrind.

Why count instructions beside the wall-clock pairs of `kvlab bench --overhead` (`bench/watch_cost.py`): on a 2-core
virtual machine a whole run's time drifts from one run to the next. On 2026-12-06 the pair ratios of plain 128 + 32
runs ranged from 0.87 to 1.13, so resolving 1 % would take well over a hundred pairs (hours at 16 + 512). The
instructions a run executes are the same on every run of the same code: one thread, greedy, a fixed hash seed, no
clock in the control flow. One run per side then gives the ratio to the last digit, on a busy machine too.

What a count does not see: time the CPU spends waiting on memory. kvlab's recording runs right after a decoder
layer's weights have swept the caches, so each of its instructions may cost more than the model's own. The
wall-clock pairs stay the headline; this is their exact breakdown, and the yardstick for a change to recording
(before and after, to the instruction). Under valgrind torch takes its AVX2 kernels (valgrind emulates no
AVX-512), so the model's own count is that of an AVX2 machine.

Each side loads the model, warms up (2 tokens plain and 2 watched, after 8 of the prompt's) and generates once;
a third process stops after the warm-up, and its count is subtracted from both: the ratio is
(watched - load) / (plain - load), the run alone. Under valgrind a run takes some 100x its native time: on
2026-12-06 a 128-token prefill took minutes of CPU, and a 128 + 32 count had not finished after 55 minutes on a
2-core machine shared with other jobs. Give it a free machine for an hour or more; 16 + 512 takes longer still.

    .venv/bin/python bench/watch_instructions.py                       # 128+32 and 16+512, SmolLM2
    .venv/bin/python bench/watch_instructions.py --lengths 128+32 --output data/bench/watch_instructions.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared part of the whole-run scripts

from whole_run import Side, whole_run_parser, write_rows

SIDES = ("load", "plain", "watched")
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false"}


def cachegrind_instructions(path: Path) -> int:
    """The total instructions (`Ir`) of a cachegrind output file, from its `summary:` line."""
    events: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            if "Ir" not in events:
                break
            return int(line.split()[1:][events.index("Ir")])
    raise ValueError(f"{path}: no 'Ir' total in a cachegrind output (events {events or 'missing'})")


def child(side: str, model_name: str, prompt: int, new: int) -> dict:
    """One side, in this process: load the model, warm up (`Side`), then (unless `side` is "load") one greedy
    generation of `new` tokens after a `prompt`-token window of the pydoc text, plain or inside `kvlab.watch`, through
    the same `generate_once` as the wall-clock pairs. Returns the tokens, to check both sides generated the same."""
    # the warm-up on the prompt's first 8 tokens: a full prefill takes minutes under valgrind, and what runs once
    # runs at any length
    run = Side(model_name, prompt, warm_prompt=8)
    if side == "load":
        return {"side": side, "tokens": []}
    tokens, watch = run.generate(side == "watched", new)
    assert watch is None or watch.trace.updates, "the watched run recorded nothing"
    return {"side": side, "tokens": tokens}


def _command(side: str, model_name: str, prompt: int, new: int, out: Path) -> list[str]:
    return [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--branch-sim=no",
        f"--cachegrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        side,
        "--model",
        model_name,
        "--lengths",
        f"{prompt}+{new}",
    ]


def count(model_name: str, lengths: list[tuple[int, int]], jobs: int, workdir: Path) -> list[dict]:
    """Every side's instructions, `jobs` processes at a time: one load for all lengths, plain and watched per
    length (`compare`'s rows)."""
    runs = [("load", *lengths[0])] + [(side, p, n) for p, n in lengths for side in SIDES[1:]]
    env = {**os.environ, **CHILD_ENV}
    # one native load first: every module's bytecode is written before any count, so that no side pays to compile
    native = [sys.executable, __file__, "--child", "load", "--model", model_name, "--lengths", f"{lengths[0][0]}+2"]
    subprocess.run(native, check=True, capture_output=True, env=env)
    waiting, running, done = list(runs), [], {}
    while waiting or running:
        while waiting and len(running) < jobs:
            side, prompt, new = waiting.pop(0)
            out = workdir / f"{side}-{prompt}+{new}.cachegrind"
            log = (workdir / f"{side}-{prompt}+{new}.log").open("w")
            process = subprocess.Popen(
                _command(side, model_name, prompt, new, out), stdout=subprocess.PIPE, stderr=log, text=True, env=env
            )
            running.append(((side, prompt, new), process, out, log))
        key, process, out, log = running.pop(0)
        stdout, _ = process.communicate()
        log.close()
        if process.returncode != 0:
            tail = Path(log.name).read_text().splitlines()[-5:]
            raise RuntimeError(f"{key[0]} {key[1]}+{key[2]} failed (exit {process.returncode}): {tail}")
        done[key] = {**json.loads(stdout.strip().splitlines()[-1]), "instructions": cachegrind_instructions(out)}
    return compare(done, lengths)


def compare(done: dict[tuple, dict], lengths: list[tuple[int, int]]) -> list[dict]:
    """One row per length from every side's count, keyed (side, prompt, new): the load (counted once, at the first
    length) subtracted from both sides, their ratio, and what watching added per new token."""
    load = done[("load", *lengths[0])]["instructions"]
    rows = []
    for prompt, new in lengths:
        plain, watched = done[("plain", prompt, new)], done[("watched", prompt, new)]
        run_plain, run_watched = plain["instructions"] - load, watched["instructions"] - load
        rows.append(
            {
                "prompt_tokens": prompt,
                "new_tokens": new,
                "load_instructions": load,
                "plain_instructions": run_plain,
                "watched_instructions": run_watched,
                "ratio": run_watched / run_plain,
                "added_per_new_token": (run_watched - run_plain) / new,
                "same_tokens": plain["tokens"] == watched["tokens"],
            }
        )
    return rows


def line(row: dict) -> str:
    return (
        f"{row['prompt_tokens']} + {row['new_tokens']} tokens, instructions of the whole run, watched / plain: "
        f"{row['ratio']:.5f}x ({row['watched_instructions']:,} / {row['plain_instructions']:,}; "
        f"{row['added_per_new_token']:,.0f} more per new token); same tokens: {row['same_tokens']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = whole_run_parser("Instructions of plain and watched generate, whole run (valgrind).")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes at a time (default: cores)")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)  # one side, run under valgrind
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.model, *args.lengths[0])), flush=True)
        os._exit(0)  # no interpreter teardown: its collections differ with what the run left, and are no part of it
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind): the counts come from its cachegrind")
    if args.jobs < 1:
        parser.error(f"--jobs N (N >= 1); got {args.jobs}")
    with tempfile.TemporaryDirectory(prefix="kvlab-instructions-") as workdir:
        rows = count(args.model, args.lengths, args.jobs, Path(workdir))
    for row in rows:
        print(line(row))
    write_rows(args.output, args.model, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
