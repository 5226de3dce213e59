"""The notebooks' timing measurements as one benchmark, on any device: writes a JSON of medians, spreads and ratio
intervals, with the exact work counters beside them.

- decode step against the cache it reads (notebook 02): DynamicCache and StaticCache(64, 1024, 4096), one decode
  step after a 6-token prompt, interleaved repeats (`kvlab.measure.decode_step`);
- time per token with and without a cache (notebook 00): the first and the last decoded token, and the whole loop
  (`kvlab.measure.latency.token_times`).

    .venv/bin/python bench/timing.py --device cpu --output data/bench/timing_cpu.json
    .venv/bin/python bench/timing.py --device cuda --output data/bench/timing_gpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform

import torch

import kvlab
from kvlab import _compat
from kvlab.atomic import write_text
from kvlab.measure import decode_step, latency, text, timing


def decode_steps(model, tokenizer, lengths, repeats: int) -> dict:
    caches = {"DynamicCache": _compat.DynamicCache(config=model.config)}
    for n in lengths:
        caches[f"StaticCache({n})"] = _compat.StaticCache(config=model.config, max_cache_len=n)
    with kvlab.watch(model):
        steps = decode_step.time_decode_step(model, text.prompt_ids(tokenizer, 6), caches, repeats=repeats)
    reference = steps["DynamicCache"].timing
    return {
        label: {
            "slots_attended": step.slots_attended,
            "attention_flops": step.attention_flops,
            "time": step.timing.as_dict(),
            "vs_dynamic": timing.compare(reference, step.timing, warn=False).as_dict(),
        }
        for label, step in steps.items()
    }


def token_times(model, tokenizer, new_tokens: int, repeats: int) -> dict:
    runs = latency.token_times(model, text.prompt_ids(tokenizer, 16), new_tokens, repeats=repeats)
    last = new_tokens - 1
    result = {}
    for name, run in runs.items():
        first, final = run.timing_at(1, "token 2"), run.timing_at(last, f"token {last + 1}")
        result[name] = {
            "tokens_run": run.tokens_run,
            "token_2": first.as_dict(),
            "last_token": final.as_dict(),
            "last_vs_token_2": timing.compare(first, final, warn=False).as_dict(),
            "total_s": [sum(r) for r in run.runs],
        }
    totals = {name: timing.Timing(name, values["total_s"]) for name, values in result.items()}
    result["speed_up"] = timing.compare(totals["DynamicCache"], totals["no cache"], warn=False).as_dict()
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--lengths", default="64,1024,4096")
    parser.add_argument("--output", help="JSON file (written atomically); default: stdout")
    args = parser.parse_args(argv)
    model, tokenizer = kvlab.load(args.model, device=args.device)
    lengths = [int(n) for n in args.lengths.split(",")]
    result = {
        "meta": {
            "model": args.model,
            "device": str(model.device),
            "device_name": torch.cuda.get_device_name(0)
            if model.device.type == "cuda"
            else f"{platform.machine()} CPU, {os.cpu_count()} cores",
            "date": datetime.date.today().isoformat(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "repeats": args.repeats,
        },
        "decode_step": decode_steps(model, tokenizer, lengths, args.repeats),
        "token_times": token_times(model, tokenizer, args.new_tokens, max(args.repeats // 2, 3)),
    }
    data = json.dumps(result, indent=1)
    if args.output:
        write_text(args.output, data + "\n")
        print(f"wrote {args.output}")
    else:
        print(data)


if __name__ == "__main__":
    main()
