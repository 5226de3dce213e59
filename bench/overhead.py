"""Instrumentation overhead: kvlab's InstrumentedDynamicCache vs transformers' own DynamicCache.

Same process, same prompt (a pydoc text window), repeats interleaved (plain, instrumented, plain, ...),
median decode tokens/s of each; prints the time ratio instrumented / plain. Greedy tokens must be identical.

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
    configs = {"plain": BenchConfig("plain", "dynamic", plain=True),
               "instrumented": BenchConfig("instrumented", "dynamic")}
    runs = {name: [] for name in configs}
    generate_once(model, tokenizer, configs["plain"], ids, args.new_tokens)  # warm-up, not counted
    for _, name in interleaved(list(configs), args.repeats):
        runs[name].append(generate_once(model, tokenizer, configs[name], ids, args.new_tokens))
    speed = {name: median([r["decode_tokens_per_s"] for r in rs]) for name, rs in runs.items()}
    same = runs["plain"][0]["tokens"] == runs["instrumented"][0]["tokens"]
    result = {"model": args.model, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
              "repeats": args.repeats, "threads": torch.get_num_threads(), "device": args.device,
              "plain_decode_tokens_per_s": speed["plain"], "instrumented_decode_tokens_per_s": speed["instrumented"],
              "time_ratio": speed["plain"] / speed["instrumented"], "same_tokens": same}  # fmt: skip
    print(f"instrumented / plain decode time: {result['time_ratio']:.3f}x  ({speed['instrumented']:.1f} vs "
          f"{speed['plain']:.1f} tok/s, median of {args.repeats} interleaved repeats; same tokens: {same})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
