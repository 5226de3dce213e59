"""kvlab.serving.batch_run: the paged kind's requests and its runner (`generate_batch` inside `kvlab.watch`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvlab.caches.options import CacheOptionError
from kvlab.explorer.models import ByteTokenizer
from kvlab.measure.paged import paged_summary
from kvlab.serving import load_workload
from kvlab.serving.batch_run import MAX_REQUESTS, TINY_LENGTHS, generate_paged, paged_requests, run_batch


def test_tiny_random_requests_have_varied_lengths():
    names, ids = paged_requests(ByteTokenizer(), 4, random_tokens=True)
    assert [len(p) for p in ids] == list(TINY_LENGTHS[:4]) and names == [f"random {n} tokens" for n in TINY_LENGTHS[:4]]
    assert paged_requests(ByteTokenizer(), 4, random_tokens=True)[1] == ids  # seeded: the same requests every run


def test_without_a_chat_template_the_workload_prompts_are_plain_text():
    workload = load_workload()
    names, ids = paged_requests(ByteTokenizer(), 2)
    assert names == workload.ids[:2] and MAX_REQUESTS == len(workload)
    assert ids == [ByteTokenizer().encode(p) for p in workload.prompts[:2]]


def test_generate_paged_serves_every_request_inside_a_watch(tiny):
    model = tiny("tiny-llama")
    result = generate_paged(model, ByteTokenizer(), {"page_size": 8, "requests": 2}, 3, random_tokens=True)
    assert (result.cache, result.options) == ("paged", {"page_size": 8, "requests": 2, "num_blocks": 0})
    assert result.prompt_tokens == sum(TINY_LENGTHS[:2]) and len(result.generated_token_ids) == 2 * 3
    meta = result.trace.meta
    assert meta["pool_blocks"] == 1 + 3  # room for both at their final length: 8 and 22 tokens in blocks of 8
    assert [r["new_tokens"] for r in meta["paged_requests"]] == [3, 3] and result.text.count("req_") == 2
    assert paged_summary(result.trace)["finished"] == 2
    assert model.config._attn_implementation != "paged|eager"  # given back


def test_options_and_the_pool_are_checked_before_anything_runs():
    nothing = SimpleNamespace()  # no model behind it: a check that passed would fail on it
    with pytest.raises(CacheOptionError, match=f"requests must be between 1 and {MAX_REQUESTS}; got 0"):
        generate_paged(nothing, ByteTokenizer(), {"requests": 0}, 4)
    with pytest.raises(CacheOptionError, match="does not take max_cache_len"):
        generate_paged(nothing, ByteTokenizer(), {"max_cache_len": 8}, 4)


class _Model:
    """What run_batch asks of a model: its attention implementation, and generate_batch's outputs."""

    def __init__(self, outputs):
        self.config = SimpleNamespace(_attn_implementation="sdpa")
        self.outputs, self.seen = outputs, []

    def set_attn_implementation(self, name):
        self.config._attn_implementation = name

    def generate_batch(self, prompts, generation_config=None, continuous_batching_config=None):
        self.seen.append(self.config._attn_implementation)
        return self.outputs


def _out(tokens, error=None):
    return SimpleNamespace(generated_tokens=tokens, error=error)


def test_run_batch_switches_the_attention_and_orders_the_requests():
    model = _Model({"req_1": _out([7]), "req_0": _out([5, 6])})
    assert run_batch(model, [[1], [2]], None, None) == [[5, 6], [7]]
    assert model.seen == ["paged|eager"] and model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="generate_batch failed: out of blocks"):
        run_batch(_Model({"req_0": _out([], "out of blocks"), "req_1": _out([7])}), [[1], [2]], None, None)
    with pytest.raises(RuntimeError, match="1 of 2 requests returned"):
        run_batch(_Model({"req_0": _out([5])}), [[1], [2]], None, None)
