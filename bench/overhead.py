"""Instrumentation overhead: kvlab's InstrumentedDynamicCache, and plain `generate` inside `kvlab.watch`, vs
transformers' own DynamicCache.

Same process, same prompt (a pydoc text window), repeats interleaved (plain, instrumented, watched, plain, ...),
median decode tokens/s of each; prints the time ratios instrumented / plain and watched / plain. Greedy tokens
must be identical in all three.

    .venv/bin/python bench/overhead.py --model smollm2 --prompt-tokens 128 --new-tokens 32 --repeats 7 --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import kvlab
from kvlab.bench import BenchConfig
from kvlab.bench.runner import generate_once
from kvlab.bench.text import token_windows
from kvlab.bench.timing import interleaved, median


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = kvlab.load(args.model)
    model.to(args.device)
    ids = token_windows(tokenizer, args.prompt_tokens, 1)[0].to(args.device)  # (1, prompt_tokens)
    plain = BenchConfig("plain", "dynamic", plain=True)
    configs = {"plain": plain, "instrumented": BenchConfig("instrumented", "dynamic"), "watched": plain}
    runs = {name: [] for name in configs}
    generate_once(model, tokenizer, plain, ids, args.new_tokens)  # warm-up, not counted
    for _, name in interleaved(list(configs), args.repeats):
        if name == "watched":  # transformers' own code and cache, recorded by kvlab.watch
            with kvlab.watch(model) as watch:
                runs[name].append(generate_once(model, tokenizer, plain, ids, args.new_tokens))
            assert watch.trace.summary()["steps"] == args.new_tokens
        else:
            runs[name].append(generate_once(model, tokenizer, configs[name], ids, args.new_tokens))
    speed = {name: median([r["decode_tokens_per_s"] for r in rs]) for name, rs in runs.items()}
    same = all(runs[name][0]["tokens"] == runs["plain"][0]["tokens"] for name in runs)
    result = {
        "model": args.model,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "plain_decode_tokens_per_s": speed["plain"],
        "instrumented_decode_tokens_per_s": speed["instrumented"],
        "watched_decode_tokens_per_s": speed["watched"],
        "time_ratio": speed["plain"] / speed["instrumented"],
        "watched_time_ratio": speed["plain"] / speed["watched"],
        "same_tokens": same,
    }
    for name in ("instrumented", "watched"):
        print(
            f"{name} / plain decode time: {speed['plain'] / speed[name]:.3f}x  ({speed[name]:.1f} vs "
            f"{speed['plain']:.1f} tok/s, median of {args.repeats} interleaved repeats)"
        )
    print(f"same tokens: {same}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
