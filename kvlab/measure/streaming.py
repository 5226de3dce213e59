"""Quality on a long text with a bounded cache: the StreamingLLM paper's yardstick (Xiao et al., ICLR 2024, Table 1).

A text is streamed through a cache one token per forward (teacher forcing: the next token is the text's, not the
model's), and each token's negative log-likelihood is kept. Until the cache is full no strategy has dropped anything,
so the first `prefill` tokens go in one forward (the same numbers, up to float rounding, in a fraction of the time);
from there on, one token per forward, as a stream is read. Perplexity is exp(mean NLL) over the tokens read after
the cache filled, where strategies differ; its 95 % interval comes from a bootstrap over blocks of consecutive tokens
(one token's loss predicts its neighbour's, so resampling single tokens would make the interval too narrow).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import Cache, DynamicCache

from kvlab import _compat
from kvlab.i18n import N_, _
from kvlab.recording.storage import kv_storage_bytes
from kvlab.strategies.key_norm import KeyNormLayer
from kvlab.strategies.sinks_window import SinkWindowLayer

# What each cache of `strategy_caches` is called in tables and figures (through `_()` where shown).
LABELS = {
    "full": N_("full cache (the model's own)"),
    "window": N_("window, no sinks"),
    "sinks_original_positions": N_("4 sinks + window, original positions (a)"),
    "sinks_cache_positions": N_("4 sinks + window, positions within the cache (b)"),
    "key_norm": N_("key-norm, last 8 kept"),
    "sinks_window": N_("sinks + window"),  # any other sinks and window (a live control's)
}
BLOCK_TOKENS = 32  # the bootstrap's block: longer than the loss's correlation along a text of prose
RESAMPLES = 2000


def long_text(topic: str = "specialnames") -> str:
    """Prose already on every machine with Python: a topic of the standard library's documentation ("Special method
    names", the data model's chapter: about 14,000 SmolLM2 tokens)."""
    from pydoc_data.topics import topics

    return topics[topic]


@dataclass(frozen=True)
class Stream:
    """One text read through one cache: `nll[i]` is token i+1's negative log-likelihood in nats (token 0 has no
    prediction); `bytes_held` and `slots_held` are what the cache's layers kept at the end."""

    name: str
    nll: list[float]
    bytes_held: int
    slots_held: int


@torch.inference_mode()
def stream_nll(model, ids: torch.Tensor, cache, prefill: int, name: str = "") -> Stream:
    """Teacher-forced NLL of every token of `ids` (1, length) after the first, read through `cache`: `prefill` tokens
    in one forward, then one token per forward."""
    ids = ids.to(model.device)
    length = ids.shape[-1]
    if not 1 <= prefill < length:
        raise ValueError(
            _("prefill must be between 1 and {last} (the text's tokens minus one), not {prefill}").format(
                last=length - 1, prefill=prefill
            )
        )
    cache_kwarg = {_compat.CACHE_KWARG: cache}
    logits = model(ids[:, :prefill], **cache_kwarg, use_cache=True).logits[0]  # (prefill, vocab)
    nll = _nll(logits, ids[0, 1 : prefill + 1])
    for t in range(prefill, length - 1):
        logits = model(ids[:, t : t + 1], **cache_kwarg, use_cache=True).logits[0]  # (1, vocab)
        nll.extend(_nll(logits, ids[0, t + 1 : t + 2]))
    return Stream(name, nll, *held(cache))


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> list[float]:
    # logits: (n, vocab); targets: (n,)
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    return (-log_probs.gather(-1, targets.reshape(-1, 1))).squeeze(-1).tolist()


def held(cache) -> tuple[int, int]:
    """(bytes, slots) the cache's layers keep: each layer's key and value storage, and its keys' sequence length."""
    layers = [layer for layer in cache.layers if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4]
    return (
        sum(kv_storage_bytes(layer.keys, layer.values) for layer in layers),
        sum(int(layer.keys.shape[-2]) for layer in layers),
    )


def rope_frequencies(model) -> list[torch.Tensor]:
    """Each layer's RoPE frequencies (head_dim // 2,), read from the model's rotary module: one set for all layers,
    or one per layer type (Gemma 3: local layers 10,000, global ones 1,000,000 as base)."""
    decoder = model.get_decoder()
    rotary, config = decoder.rotary_emb, model.config.get_text_config()
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    return [
        getattr(rotary, f"{kind}_inv_freq") if hasattr(rotary, f"{kind}_inv_freq") else rotary.inv_freq
        for kind in layer_types
    ]


def block_means(nll: list[float], block: int = BLOCK_TOKENS) -> torch.Tensor:
    """Mean NLL of each whole block of `block` consecutive tokens (a last partial block is left out): (blocks,)."""
    blocks = len(nll) // block
    if blocks < 2:
        raise ValueError(
            _("{tokens} tokens make fewer than two blocks of {block}: too few for an interval").format(
                tokens=len(nll), block=block
            )
        )
    return torch.tensor(nll[: blocks * block], dtype=torch.float64).reshape(blocks, block).mean(dim=1)


def perplexity_interval(nll: list[float], block: int = BLOCK_TOKENS, seed: int = 0) -> dict:
    """Perplexity exp(mean NLL), with the 2.5th and 97.5th percentiles of a block bootstrap (blocks of `block`
    tokens drawn with replacement, `RESAMPLES` times, fixed seed)."""
    means = block_means(nll, block)
    low, high = _exp_interval(means, seed)
    return {"ppl": math.exp(float(means.mean())), "low": low, "high": high, "tokens": len(nll)}


def ratio_interval(nll: list[float], reference: list[float], block: int = BLOCK_TOKENS, seed: int = 0) -> dict:
    """Perplexity of `nll` over that of `reference` (the same tokens), with a paired block bootstrap's 95 %
    interval: the same blocks are drawn for both, so the text's hard and easy passages cancel."""
    if len(nll) != len(reference):
        raise ValueError(
            _("a ratio needs the same tokens: {tokens} against {reference}").format(
                tokens=len(nll), reference=len(reference)
            )
        )
    differences = block_means(nll, block) - block_means(reference, block)
    low, high = _exp_interval(differences, seed)
    return {"ratio": math.exp(float(differences.mean())), "low": low, "high": high}


def _exp_interval(values: torch.Tensor, seed: int) -> tuple[float, float]:
    """exp of the 2.5th and 97.5th percentiles of `RESAMPLES` resampled means of `values` (n,), with replacement."""
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(values), (RESAMPLES, len(values)), generator=generator)
    quantiles = torch.tensor([0.025, 0.975], dtype=torch.float64)
    low, high = torch.quantile(values[picks].mean(dim=1), quantiles).tolist()
    return math.exp(low), math.exp(high)


def rolling_mean(nll: list[float], width: int = BLOCK_TOKENS) -> list[float]:
    """The mean NLL of the last `width` tokens at each position (fewer at the start): the per-position loss curve."""
    values = torch.tensor(nll, dtype=torch.float64)
    sums = torch.cat([torch.zeros(1, dtype=torch.float64), values.cumsum(0)])
    ends = torch.arange(1, len(nll) + 1)
    starts = (ends - width).clamp(min=0)
    return ((sums[ends] - sums[starts]) / (ends - starts)).tolist()


def summary(streams: dict[str, Stream], budget: int) -> list[dict]:
    """One row per stream (keyed by `strategy_caches`'s names, "full" among them): perplexity with its interval
    and its paired ratio to the full cache over the tokens read after the first `budget`, bytes and slots held,
    and every token's NLL (rounded to 1e-4 nats: the per-position figure's data)."""
    scored = {name: stream.nll[budget:] for name, stream in streams.items()}
    return [
        {
            "config": name,
            "label": LABELS.get(name, name),
            **perplexity_interval(scored[name]),
            "ratio_to_full": ratio_interval(scored[name], scored["full"]),
            "bytes_held": stream.bytes_held,
            "slots_held": stream.slots_held,
            "nll": [round(x, 4) for x in stream.nll],
        }
        for name, stream in streams.items()
    ]


def frontier_rows(rows: list[dict]) -> list[dict]:
    """The yardstick's rows (`bench/streaming_quality.py`'s) as `kvlab.plots.frontier` reads a bench's: bytes held
    over the full cache's, and the perplexity change against it in % (labels in the reader's language)."""
    full = next(row for row in rows if row["config"] == "full")
    return [
        {
            "label": _(row["label"]),
            "status": "measured",
            "ratio_vs_dynamic": row["bytes_held"] / full["bytes_held"],
            "perplexity_delta_pct": (row["ppl"] / full["ppl"] - 1) * 100,
        }
        for row in rows
        if row["config"] != "full"
    ]


def strategy_caches(model, budget: int, sinks: int = 4, recent: int = 8) -> dict[str, Callable]:
    """The caches of the yardstick, each a fresh-cache factory, `budget` tokens per layer for the bounded ones: the
    model's own cache (full; Gemma 3's sliding layers keep their 512 window), a window without sinks, sinks + window
    with the kept keys at their original positions (a) and re-rotated to sit together as StreamingLLM does (b), and
    key-norm eviction keeping the last `recent` tokens."""

    def replicated(layer) -> Callable:
        return lambda: Cache(layer_class_to_replicate=layer)

    frequencies = rope_frequencies(model)
    return {
        "full": lambda: DynamicCache(config=model.config),
        "window": replicated(functools.partial(SinkWindowLayer, sinks=0, window=budget)),
        "sinks_original_positions": replicated(functools.partial(SinkWindowLayer, sinks=sinks, window=budget - sinks)),
        "sinks_cache_positions": lambda: Cache(
            layers=[SinkWindowLayer(sinks=sinks, window=budget - sinks, inv_freq=f) for f in frequencies]
        ),
        "key_norm": replicated(functools.partial(KeyNormLayer, budget=budget, recent=recent)),
    }


# The paper's own numbers beside kvlab's: Xiao et al., "Efficient Streaming Language Models with Attention Sinks"
# (ICLR 2024), Table 1: Llama-2-13B, perplexity on the first book of PG-19 (65K tokens), a cache of 1,024 tokens.
# Data only, nothing here is measured.
STREAMING_LLM_TABLE_1 = {
    "source": "Xiao et al., 'Efficient Streaming Language Models with Attention Sinks' (ICLR 2024), Table 1",
    "model": "Llama-2-13B",
    "text": "PG-19, first book (65K tokens)",
    "cache_tokens": 1024,
    "rows": [
        {"config": "window", "sinks": 0, "window": 1024, "ppl": 5158.07},
        {"config": "sinks", "sinks": 4, "window": 1020, "ppl": 5.40},
        {"config": "newline sinks", "sinks": 4, "window": 1020, "ppl": 5.60},
    ],
}
