"""The continuous-batching bench row: same greedy tokens as one request at a time, both timings reported."""

import torch

from kvlab.bench.batching import batching_row


def test_batched_and_sequential_agree_and_are_timed(tiny):
    model = tiny("tiny-llama")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 120, (n,), generator=g).tolist() for n in (5, 9, 14)]
    row = batching_row(model, prompts, new_tokens=6, repeats=1, page_size=4)
    assert row["same_tokens"] is True
    assert row["requests"] == 3 and row["batched_seconds"] > 0 and row["sequential_seconds"] > 0
    assert row["speedup"] == row["sequential_seconds"] / row["batched_seconds"]
    assert model.config._attn_implementation != "paged|eager"  # put back
