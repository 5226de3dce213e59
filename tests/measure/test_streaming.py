import functools
import math

import pytest
import torch
from transformers import Cache, DynamicCache

import kvlab
from kvlab.measure import streaming
from kvlab.strategies.key_norm import KeyNormLayer
from kvlab.strategies.sinks_window import SinkWindowLayer

from .float_bounds import forward_atol


@pytest.fixture
def text_ids():
    return torch.randint(3, 120, (1, 40), generator=torch.Generator().manual_seed(0))


def whole_nll(model, ids) -> torch.Tensor:
    """Each token's NLL from one forward over the whole text, no cache: the reference a stream must equal."""
    with torch.no_grad():
        log_probs = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)  # (length - 1, vocab)
    return -log_probs.gather(-1, ids[0, 1:].reshape(-1, 1)).squeeze(-1)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_a_full_cache_streamed_equals_one_forward(tiny, text_ids, name):
    """40 tokens cross tiny-gemma3's sliding window of 8: the stream still equals the whole text read at once."""
    model = tiny(name)
    stream = streaming.stream_nll(model, text_ids, DynamicCache(config=model.config), prefill=6)
    reference = whole_nll(model, text_ids)
    assert len(stream.nll) == 39
    torch.testing.assert_close(
        torch.tensor(stream.nll, dtype=torch.float64), reference, rtol=0, atol=forward_atol(model.config, reference)
    )


def test_bounded_caches_hold_their_budget_and_count_its_bytes(tiny, text_ids):
    model = tiny("tiny-llama")
    caches = streaming.strategy_caches(model, budget=12, sinks=2, recent=3)
    assert list(caches) == ["full", "window", "sinks_original_positions", "sinks_cache_positions", "key_norm"]
    config = model.config
    slot_bytes = config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4 * 2  # K and V
    streams = {name: streaming.stream_nll(model, text_ids, make(), prefill=12) for name, make in caches.items()}
    layers = config.num_hidden_layers
    assert streams["full"].slots_held == 39 * layers  # the last token is read, never fed: nothing follows it
    for name in caches:
        if name != "full":
            assert streams[name].slots_held == 12 * layers
        assert streams[name].bytes_held == streams[name].slots_held * slot_bytes
        # until the cache is full no strategy dropped anything: the first 12 predictions are the full cache's
        assert streams[name].nll[:12] == pytest.approx(streams["full"].nll[:12], abs=1e-5)
    assert streams["window"].nll[20:] != pytest.approx(streams["full"].nll[20:], abs=1e-3)


def test_the_prefill_must_leave_tokens_to_stream(tiny, text_ids):
    with pytest.raises(ValueError, match="prefill must be between 1 and 39"):
        streaming.stream_nll(tiny("tiny-llama"), text_ids, None, prefill=40)


def test_rope_frequencies_follow_the_layer_types(tiny):
    gemma = tiny("tiny-gemma3")
    rotary, kinds = gemma.get_decoder().rotary_emb, gemma.config.layer_types
    for kind, frequencies in zip(kinds, streaming.rope_frequencies(gemma), strict=True):
        assert frequencies is getattr(rotary, f"{kind}_inv_freq")
    assert len(set(kinds)) == 2
    llama = tiny("tiny-llama")
    assert all(f is llama.get_decoder().rotary_emb.inv_freq for f in streaming.rope_frequencies(llama))


def test_a_constant_loss_has_its_exact_perplexity_and_no_spread():
    result = streaming.perplexity_interval([math.log(7.0)] * 96)
    assert result["ppl"] == pytest.approx(7.0) and result["low"] == pytest.approx(7.0)
    assert result["high"] == pytest.approx(7.0) and result["tokens"] == 96


def test_the_interval_holds_the_estimate_and_widens_with_noise():
    generator = torch.Generator().manual_seed(3)
    calm = (2.0 + 0.1 * torch.randn(640, generator=generator)).tolist()
    rough = (2.0 + 1.0 * torch.randn(640, generator=generator)).tolist()
    a, b = streaming.perplexity_interval(calm), streaming.perplexity_interval(rough)
    assert a["low"] < a["ppl"] < a["high"] and b["low"] < b["ppl"] < b["high"]
    assert b["high"] / b["low"] > 3 * (a["high"] / a["low"] - 1) + 1


def test_a_paired_ratio_cancels_what_both_share():
    generator = torch.Generator().manual_seed(4)
    reference = (2.0 + torch.randn(320, generator=generator)).tolist()
    shifted = [x + 0.25 for x in reference]  # every token 0.25 nats harder: the ratio is exactly e^0.25
    result = streaming.ratio_interval(shifted, reference)
    assert result["ratio"] == pytest.approx(math.exp(0.25))
    assert result["low"] == pytest.approx(math.exp(0.25)) and result["high"] == pytest.approx(math.exp(0.25))
    with pytest.raises(ValueError, match="same tokens"):
        streaming.ratio_interval(shifted[:-1], reference)


def test_too_few_tokens_for_two_blocks_is_refused():
    with pytest.raises(ValueError, match="fewer than two blocks"):
        streaming.perplexity_interval([1.0] * 40, block=32)


def test_rolling_mean_is_the_mean_of_the_last_tokens():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert streaming.rolling_mean(values, width=2) == pytest.approx([1.0, 1.5, 2.5, 3.5, 4.5])


def test_the_long_text_is_prose_long_enough_for_the_budget():
    text = streaming.long_text()
    assert text.startswith("Special method names") and len(text.split()) > 4 * 1024


def test_summary_scores_past_the_budget_and_the_frontier_reads_it():
    full = streaming.Stream("full", [1.0] * 64 + [2.0] * 64, bytes_held=1000, slots_held=10)
    window = streaming.Stream("window", [1.0] * 64 + [2.5] * 64, bytes_held=250, slots_held=5)
    rows = streaming.summary({"full": full, "window": window}, budget=64)
    assert [row["label"] for row in rows] == ["full cache (the model's own)", "window, no sinks"]
    assert rows[0]["ppl"] == pytest.approx(math.exp(2.0)) and rows[0]["tokens"] == 64
    assert rows[1]["ratio_to_full"]["ratio"] == pytest.approx(math.exp(0.5))
    (point,) = streaming.frontier_rows(rows)
    assert point["label"] == "window, no sinks" and point["ratio_vs_dynamic"] == 0.25
    assert point["perplexity_delta_pct"] == pytest.approx((math.exp(0.5) - 1) * 100)


@pytest.mark.parametrize("budget_kwargs", [{"sinks": 2, "window": 6}, {"budget": 8, "recent": 2}])
def test_the_bytes_held_are_the_watchs_trace_bytes(tiny, text_ids, budget_kwargs):
    """What the yardstick reports as held is what `kvlab.watch` records for the same strategy, to the byte; and the
    trace counts the tokens each layer dropped: 39 fed - 8 kept, per layer."""
    model = tiny("tiny-llama")
    layer_class = SinkWindowLayer if "sinks" in budget_kwargs else KeyNormLayer
    layer = functools.partial(layer_class, **budget_kwargs)
    with kvlab.watch(model) as watch:
        stream = streaming.stream_nll(model, text_ids, Cache(layer_class_to_replicate=layer), prefill=8)
    assert watch.trace.bytes_by_step()[-1] == stream.bytes_held
    assert watch.trace.summary()["tokens_evicted"] == (39 - 8) * model.config.num_hidden_layers
