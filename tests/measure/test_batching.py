"""kvlab.measure.batching: `generate_batch` against one `generate` per request, same greedy tokens, both timed."""

import torch
from transformers.utils import logging as hf_logging

from kvlab.measure.batching import batching_row


def test_batched_and_sequential_agree_are_timed_and_count_their_forwards(tiny):
    model = tiny("tiny-llama")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 120, (n,), generator=g).tolist() for n in (5, 9, 14)]
    verbosity = hf_logging.get_verbosity()
    row = batching_row(model, prompts, new_tokens=6, repeats=2, page_size=4)
    assert hf_logging.get_verbosity() == verbosity  # transformers' eos warnings are quiet only during the runs
    assert row["same_tokens"] is True
    assert row["requests"] == 3 and row["batched_seconds"] > 0 and row["sequential_seconds"] > 0
    assert row["speedup"] == row["sequential_seconds"] / row["batched_seconds"]
    low, high = row["speedup_interval"]
    assert low <= row["speedup"] <= high
    assert row["verdict"].startswith("too noisy to tell")  # two repeats cannot tell a difference
    assert [len(row["timings"][route]["times_s"]) for route in ("batched", "sequential")] == [2, 2]
    assert row["timings"]["batched"]["median_s"] == row["batched_seconds"]
    # one request at a time: a prefill and 5 decoding forwards each; batched: fewer forwards, each over all
    assert row["sequential_forwards"] == 3 * 6
    assert 6 <= row["batched_forwards"] < row["sequential_forwards"]
    assert model.config._attn_implementation != "paged|eager"  # put back
    assert not model._forward_pre_hooks  # the forward counter is removed
