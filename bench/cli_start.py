"""How long the light command line takes to start: a benchmark, not a test (README: well under 0.5 s).

Each command runs `python -m kvlab ARGS` in a fresh interpreter, `--repeats` times; the median and the fastest
wall time are reported, with the heavy modules (torch, transformers) it imported, which should be none. A wall
time depends on the machine and on what else runs on it, so nothing here passes or fails; the property that can
fail (no torch imported) is checked by `tests/test_light_cli.py`.

    .venv/bin/python bench/cli_start.py                        # a table on stdout
    .venv/bin/python bench/cli_start.py --repeats 20 --json --output data/bench/cli_start.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from kvlab.measure.timing import Stopwatch  # kvlab's one clock (no torch)

COMMANDS = (
    ("--help",),
    ("--version",),
    ("size", "--help"),
    ("size", "--model", "llama-2-7b", "--tokens", "4096", "--dtype", "float16"),
)
HEAVY = ("torch", "transformers")


def start_once(args: tuple[str, ...], python: str = sys.executable) -> tuple[float, set[str], int]:
    """One `python -X importtime -m kvlab ARGS`: (wall seconds, the heavy modules it imported, exit status).

    -X importtime adds a little to the wall time; it is what says, from outside, which modules were imported."""
    with Stopwatch() as watch:
        done = subprocess.run(
            [python, "-X", "importtime", "-m", "kvlab", *args], capture_output=True, text=True, timeout=120
        )
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return watch.seconds, set(HEAVY) & modules, done.returncode


def measure(repeats: int, commands=COMMANDS, python: str = sys.executable) -> list[dict]:
    """One row per command: median and fastest start time in seconds over `repeats` runs, heavy imports."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}")
    rows = []
    for args in commands:
        runs = [start_once(args, python) for _ in range(repeats)]
        rows.append(
            {
                "command": " ".join(("kvlab", *args)),
                "repeats": repeats,
                "median_seconds": statistics.median(r[0] for r in runs),
                "min_seconds": min(r[0] for r in runs),
                "heavy_imports": sorted(set().union(*(r[1] for r in runs))),
                "exit_status": sorted({r[2] for r in runs}),
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    width = max(len(r["command"]) for r in rows)
    lines = [f"{'command':<{width}}  {'median s':>8}  {'min s':>6}  heavy imports"]
    for r in rows:
        heavy = ", ".join(r["heavy_imports"]) or "none"
        lines.append(f"{r['command']:<{width}}  {r['median_seconds']:>8.3f}  {r['min_seconds']:>6.3f}  {heavy}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time the start of kvlab's light command line.")
    parser.add_argument("--repeats", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument("--output", help="write to FILE instead of printing")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to start (default: this one)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats N (N >= 1); got {args.repeats}")
    rows = measure(args.repeats, python=args.python)
    text = json.dumps({"python": args.python, "rows": rows}, indent=2) + "\n" if args.json else table(rows)
    if args.output:
        from kvlab.atomic import write_text

        write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
