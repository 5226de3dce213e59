"""Quality on a long text with a bounded cache, as in the StreamingLLM paper's Table 1: the Python documentation's
"Special method names" streamed token by token through each cache of `kvlab.measure.streaming.strategy_caches`, on
both bundled models; perplexity with a 95 % block-bootstrap interval, its ratio to the full cache (paired), the bytes
held. Writes a JSON file and a markdown table beside it (both atomically). Run it once, on a quiet machine:

    OMP_NUM_THREADS=1 .venv/bin/python bench/streaming_quality.py --output data/bench/streaming_quality.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import kvlab
from kvlab import atomic
from kvlab.measure.streaming import (
    BLOCK_TOKENS,
    STREAMING_LLM_TABLE_1,
    long_text,
    strategy_caches,
    stream_nll,
    summary,
)
from kvlab.measure.timing import Stopwatch
from kvlab.units import human_bytes


def measure_model(name: str, tokens: int, budget: int) -> dict:
    model, tokenizer = kvlab.load(name)
    ids = tokenizer(long_text(), return_tensors="pt").input_ids[:, :tokens]  # (1, tokens)
    streams = {}
    for config, make in strategy_caches(model, budget).items():
        with Stopwatch() as watch:
            streams[config] = stream_nll(model, ids, make(), prefill=budget, name=config)
        print(f"{name} {config}: {watch.seconds:.0f} s", flush=True)
    rows = summary(streams, budget)
    return {"model": name, "tokens": int(ids.shape[-1]), "budget": budget, "rows": rows}


def markdown(result: dict) -> str:
    lines = [
        f"Perplexity of the tokens read after the cache filled (tokens {result['budget'] + 2}-{result['tokens']} of "
        f"Python's 'Special method names'), 95 % interval from a bootstrap over blocks of {BLOCK_TOKENS} tokens; "
        f"bounded caches hold {result['budget']} tokens per layer.",
        "",
        "| model | cache | perplexity (95 % interval) | vs full (paired 95 % interval) | bytes held |",
        "|---|---|---|---|---|",
    ]
    for model in result["models"]:
        for row in model["rows"]:
            ratio = row["ratio_to_full"]
            lines.append(
                f"| {model['model']} | {row['label']} | {row['ppl']:.2f} ({row['low']:.2f}-{row['high']:.2f}) | "
                f"{ratio['ratio']:.2f}x ({ratio['low']:.2f}-{ratio['high']:.2f}) | {human_bytes(row['bytes_held'])} |"
            )
    paper = STREAMING_LLM_TABLE_1
    lines += [
        "",
        f"The paper ({paper['source']}; {paper['model']}, {paper['text']}, cache {paper['cache_tokens']}):",
        "",
    ]
    lines += [f"- {row['config']} ({row['sinks']} + {row['window']}): {row['ppl']:,.2f}" for row in paper["rows"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    parser.add_argument("--tokens", type=int, default=768, help="tokens of the text read (default 768)")
    parser.add_argument("--budget", type=int, default=128, help="tokens each bounded cache layer keeps (default 128)")
    parser.add_argument("--output", type=Path, default=Path("data/bench/streaming_quality.json"))
    parser.add_argument("--table-only", action="store_true", help="write the markdown table from --output's JSON")
    args = parser.parse_args()
    if args.table_only:
        atomic.write_text(args.output.with_suffix(".md"), markdown(json.loads(args.output.read_text())))
        return
    atomic.check_writable(args.output)
    torch.manual_seed(0)
    result = {
        "text": "pydoc_data.topics 'specialnames' (Python documentation, Special method names)",
        "block_tokens": BLOCK_TOKENS,
        "threads": torch.get_num_threads(),
        "models": [measure_model(name, args.tokens, args.budget) for name in args.models],
        "published": STREAMING_LLM_TABLE_1,
    }
    result["budget"], result["tokens"] = args.budget, result["models"][0]["tokens"]
    atomic.write_text(args.output, json.dumps(result, indent=1) + "\n")
    atomic.write_text(args.output.with_suffix(".md"), markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
