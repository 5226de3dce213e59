"""What watching costs, end to end: the whole-run ratio of `kvlab bench --overhead` (watched / plain generate,
pairs that take turns token by token, SmolLM2, 1 thread) at 128 + 32 and at 16 + 512 tokens, with its interval and
its replayed breakdown, then the same pairs with neither side watched (the instrument's floor: it must read 1 within
its interval, or the pairing itself favours a side); `kvlab models list`'s start; and `kvlab run` against the plain
transformers script that does the same.
Run the first part after any change that touches recording (issue 41's yardstick):

    OMP_NUM_THREADS=1 .venv/bin/python bench/watch_cost.py --only overhead

Every comparison goes through kvlab's timing instrument (`kvlab.measure.timing`): repeats interleaved, medians,
a bootstrap interval of the ratio and its verdict. Whole commands are timed as processes, started alternately,
so that a busy neighbour weighs on both sides alike. Run it on a quiet machine; nothing here passes or fails.

    .venv/bin/python bench/watch_cost.py --output data/bench/watch_cost.json
    .venv/bin/python bench/watch_cost.py --only commands --repeats 5     # the command-line figures alone
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kvlab.bench.overhead import recording_lines
from kvlab.measure.timing import Stopwatch, Timing, compare, interleaved

# What a user without kvlab writes for `kvlab run --model smollm2 --cache dynamic --prompt hi --max-new-tokens 16`:
# load the prepared directory, apply the chat template, generate greedily.
PLAIN_SCRIPT = """
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
directory = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(directory)
model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
ids = tokenizer(text, return_tensors="pt").input_ids
with torch.inference_mode():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
print(tokenizer.decode(out[0, ids.shape[-1]:], skip_special_tokens=True))
"""
KVLAB_RUN = ("run", "--model", "smollm2", "--cache", "dynamic", "--prompt", "hi", "--max-new-tokens", "16")
OVERHEAD_LENGTHS = ((128, 32, 11), (16, 512, 5))  # (prompt tokens, new tokens, pairs at least)


def _wall(command: list[str], env: dict) -> float:
    with Stopwatch() as watch:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return watch.seconds


def time_commands(commands: dict[str, list[str]], repeats: int, env: dict) -> dict[str, Timing]:
    """Wall seconds of each command, `repeats` times each, interleaved, after one untimed run each."""
    for command in commands.values():
        _wall(command, env)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _, label in interleaved(list(commands), repeats):
        times[label].append(_wall(commands[label], env))
    return {label: Timing(label, values) for label, values in times.items()}


def command_figures(repeats: int) -> dict:
    """`kvlab run` against the plain script (ratio and interval), and `kvlab models list` (median and IQR)."""
    from kvlab import models

    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    kvlab = [sys.executable, "-m", "kvlab"]
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(PLAIN_SCRIPT)
    try:
        run = time_commands(
            {
                "plain transformers": [sys.executable, script.name, str(models.bundled("smollm2").directory)],
                "kvlab run": [*kvlab, *KVLAB_RUN],
            },
            repeats,
            env,
        )
    finally:
        Path(script.name).unlink()
    listing = time_commands({"kvlab models list": [*kvlab, "models", "list"]}, repeats, env)["kvlab models list"]
    versus = compare(run["plain transformers"], run["kvlab run"], warn=False)
    return {
        "kvlab_run_vs_plain": versus.as_dict(),
        "models_list": listing.as_dict(),
    }


def overhead_figures(model, tokenizer, max_pairs: int, max_minutes: float) -> list[dict]:
    """`kvlab bench --overhead` (SmolLM2, one torch thread) at each of OVERHEAD_LENGTHS: the whole run in pairs."""
    from kvlab.bench import BenchSettings
    from kvlab.bench.overhead import run_overhead

    rows = []
    for prompt, new, least in OVERHEAD_LENGTHS:
        settings = BenchSettings("smollm2", prompt_tokens=prompt, new_tokens=new, repeats=least, threads=1)
        pairs, seconds = max(max_pairs, least), 60 * max_minutes
        rows.append(run_overhead(model, tokenizer, settings, max_pairs=pairs, max_seconds=seconds))
        print(overhead_line(rows[-1]), flush=True)
    return rows


def floor_figures(model, tokenizer, max_pairs: int, max_minutes: float) -> list[dict]:
    """The same pairs with neither side watched, at each of OVERHEAD_LENGTHS: the instrument's floor (an A/A that must
    read 1 within its interval), with no replayed breakdown."""
    from kvlab.bench import BenchSettings
    from kvlab.bench.overhead import whole_run_overhead
    from kvlab.measure.text import token_windows

    rows = []
    for prompt, new, least in OVERHEAD_LENGTHS:
        ids = token_windows(tokenizer, prompt, 1, BenchSettings.seed)[0]  # (1, prompt), as `kvlab bench` takes it
        pairs, seconds = max(max_pairs, least), 60 * max_minutes
        whole = whole_run_overhead(model, tokenizer, ids, new, least, pairs, max_seconds=seconds, watching=False)
        rows.append({"prompt_tokens": prompt, "new_tokens": new, "whole_run": whole})
        print(overhead_line(rows[-1]), flush=True)
    return rows


def overhead_line(row: dict) -> str:
    from kvlab.bench.overhead import whole_run_line

    return f"{row['prompt_tokens']} + {row['new_tokens']} tokens, {whole_run_line(row['whole_run'])}"


def lines(result: dict) -> list[str]:
    out = []
    for row in result.get("overhead", []):
        out.append(overhead_line(row))
        out.extend(
            f"{row['prompt_tokens']} + {row['new_tokens']} tokens, breakdown, {line}"
            for line in recording_lines(row["recording"])
        )
    out.extend(overhead_line(row) for row in result.get("floor", []))
    if "commands" in result:
        versus = result["commands"]["kvlab_run_vs_plain"]
        out.append(
            f"kvlab run / plain transformers script, wall time: {versus['ratio']:.3f}x ({versus['low']:.3f}-"
            f"{versus['high']:.3f}; {versus['b']['median_s']:.2f} s vs {versus['a']['median_s']:.2f} s): "
            f"{versus['verdict']}"
        )
        listing = result["commands"]["models_list"]
        out.append(
            f"kvlab models list: {listing['median_s']:.3f} s (IQR {listing['q1_s']:.3f}-{listing['q3_s']:.3f}, "
            f"{len(listing['times_s'])} runs)"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="What watching costs: overhead, kvlab run, kvlab models list.")
    parser.add_argument("--only", choices=("overhead", "commands"), help="one half of the figures")
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command (default 7)")
    parser.add_argument(
        "--max-pairs", type=int, default=41, help="whole-run pairs at most, per length, until 1 %% is resolved"
    )
    parser.add_argument(
        "--max-minutes", type=float, default=15, help="no new whole-run pair starts after this, per length (default 15)"
    )
    parser.add_argument("--output", help="write the JSON to FILE (atomically) as well as printing the lines")
    args = parser.parse_args(argv)
    if args.repeats < 3:
        parser.error(f"--repeats N (N >= 3, for an interval); got {args.repeats}")
    result: dict = {}
    if args.only in (None, "overhead"):
        import torch

        import kvlab

        torch.set_num_threads(1)  # as `kvlab bench --overhead --threads 1`, for the floor too
        model, tokenizer = kvlab.load("smollm2")  # once, for both
        result["overhead"] = overhead_figures(model, tokenizer, args.max_pairs, args.max_minutes)
        result["floor"] = floor_figures(model, tokenizer, args.max_pairs, args.max_minutes)
    if args.only in (None, "commands"):
        result["commands"] = command_figures(args.repeats)
    for line in lines(result):
        print(line)
    if args.output:
        from kvlab.atomic import write_text

        write_text(args.output, json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
