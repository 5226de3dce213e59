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

LENGTHS = ("128+32", "16+512")
SIDES = ("load", "plain", "watched")
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false"}


def parse_length(text: str) -> tuple[int, int]:
    """'128+32' -> (128, 32): prompt tokens + new tokens."""
    try:
        prompt, new = (int(part) for part in text.split("+"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a length is PROMPT+NEW tokens, e.g. 128+32; got {text!r}") from None
    if prompt < 2 or new < 2:
        raise argparse.ArgumentTypeError(f"PROMPT and NEW must each be at least 2; got {text!r}")
    return prompt, new


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
    """One side, in this process: load the model, warm up, then (unless `side` is "load") one greedy generation of
    `new` tokens after a `prompt`-token window of the pydoc text, plain or inside `kvlab.watch`, through the same
    `generate_once` as the wall-clock pairs. Returns the tokens, to check both sides generated the same."""
    import torch

    import kvlab
    from kvlab.bench.configs import BenchConfig
    from kvlab.bench.runner import generate_once
    from kvlab.measure.text import token_windows

    torch.set_num_threads(1)
    model, tokenizer = kvlab.load(model_name)
    ids = token_windows(tokenizer, prompt, 1, 0)[0]  # (1, prompt)
    plain = BenchConfig("plain", "dynamic", plain=True)

    def generate(watched: bool, prompt_ids, tokens: int) -> list[int]:
        if not watched:
            return generate_once(model, tokenizer, plain, prompt_ids, tokens)["tokens"]
        with kvlab.watch(model) as watch:
            generated = generate_once(model, tokenizer, plain, prompt_ids, tokens)["tokens"]
        assert watch.trace.updates, "the watched run recorded nothing"
        return generated

    # Every side warms up alike, as the wall-clock pairs do: what runs once (lazy imports, first calls) is in the
    # load's count too, and the subtraction leaves the run alone. On the prompt's first 8 tokens: a full prefill
    # takes minutes under valgrind, and what runs once runs at any length.
    generate(False, ids[:, :8], 2)
    generate(True, ids[:, :8], 2)
    return {"side": side, "tokens": [] if side == "load" else generate(side == "watched", ids, new)}


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


def whole_run_parser(description: str) -> argparse.ArgumentParser:
    """The options every whole-run script of watching's cost takes (this one and `watch_lockstep.py`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="smollm2", help="a bundled model or a saved directory (default smollm2)")
    parser.add_argument(
        "--lengths", nargs="+", type=parse_length, default=[parse_length(x) for x in LENGTHS], help="PROMPT+NEW ..."
    )
    parser.add_argument("--output", help="write the JSON to FILE (atomically) as well as printing the lines")
    return parser


def write_rows(path: str | None, model_name: str, rows: list[dict]) -> None:
    """The rows as JSON in `path` (atomically), where one was given."""
    if path:
        from kvlab.atomic import write_text

        write_text(path, json.dumps({"model": model_name, "rows": rows}, indent=1) + "\n")


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
