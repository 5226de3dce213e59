"""How much a cache changes what the model says, measured against a DynamicCache on the same tokens.

Three measures, from coarse to fine:
- greedy token agreement: generate freely with both caches and count the tokens that match (and the length of
  the common prefix: after the first different token the two texts drift apart for good);
- logit KL divergence: feed both caches the *same* tokens (teacher forcing) and compare the next-token
  distributions at every position, KL(reference || cache), in nats;
- perplexity of real text through the cache: exp(mean negative log-likelihood of each next token).

Teacher forcing decodes one token per forward after a prefill, because that is when a cache is read: a
QuantizedCache attends to full-precision keys during the prefill and to its packed copy only afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kvlab.bench.quality import teacher_forced_logits
from kvlab.caches import make_cache
from kvlab.trace import Trace


def token_agreement(reference: list[int], other: list[int]) -> dict:
    """Matching tokens of two greedy generations: common prefix length and position-wise matches."""
    n = min(len(reference), len(other))
    prefix = next((i for i in range(n) if reference[i] != other[i]), n)
    matches = sum(1 for i in range(n) if reference[i] == other[i])
    return {"tokens": n, "common_prefix": prefix, "matches": matches, "agreement": matches / n if n else 1.0}


@dataclass
class TeacherForced:
    log_probs: torch.Tensor  # (positions, vocab): log-softmax of the logits predicting each scored token
    targets: torch.Tensor  # (positions,): the tokens that actually follow
    trace: Trace | None  # what the cache did while scoring
    decode_seconds: float = 0.0  # wall time of the one-token forwards after the prefill (not the prefill)

    @property
    def nll(self) -> float:
        return float(-self.log_probs.gather(1, self.targets[:, None]).mean())

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)


def teacher_forced(
    model, input_ids: torch.Tensor, prefill_tokens: int, cache: str = "dynamic", **options
) -> TeacherForced:
    """Prefill `prefill_tokens` of `input_ids` (1, n), then feed the rest one token per forward through a cache
    of kind `cache` (with `options`), scoring each next token. Positions scored: n - prefill_tokens."""
    n = input_ids.shape[-1]
    input_ids = input_ids.to(model.device)
    if not 1 <= prefill_tokens < n:
        raise ValueError(f"prefill_tokens must be between 1 and {n - 1} for a {n}-token input; got {prefill_tokens}")
    trace = Trace()
    cache_object = make_cache(cache, model.config, trace=trace, **options)
    timing = {"decode_seconds": 0.0}
    log_probs = teacher_forced_logits(model, input_ids, prefill_tokens, cache_object, timing)  # (positions, vocab)
    return TeacherForced(
        log_probs,
        input_ids[0, prefill_tokens:].clone(),
        trace if cache_object is not None else None,
        timing["decode_seconds"],
    )


def compare(reference: TeacherForced, other: TeacherForced) -> dict:
    """KL(reference || other) averaged over positions, top-1 agreement, and both perplexities."""
    if reference.log_probs.shape != other.log_probs.shape or not torch.equal(reference.targets, other.targets):
        raise ValueError("compare needs two teacher-forced runs over the same tokens")
    p, q = reference.log_probs, other.log_probs
    kl = (p.exp() * (p - q)).sum(-1)  # (positions,)
    top1 = (p.argmax(-1) == q.argmax(-1)).float()
    return {
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "top1_agreement": float(top1.mean()),
        "perplexity": other.perplexity,
        "reference_perplexity": reference.perplexity,
    }


def sweep(model, input_ids: torch.Tensor, prefill_tokens: int, configs: dict[str, dict]) -> tuple[list[dict], dict]:
    """Teacher-force `input_ids` through a DynamicCache and through a QuantizedCache per entry of `configs`
    ({label: quantized options}); one row per configuration, plus {label: TeacherForced} (with "dynamic").

    Row fields: the `compare` measures; the cache at the end (cache_bytes, packed_bytes, residual_bytes);
    `memory_ratio_16bit`, the cache over a 16-bit cache of the same tokens; `packed_ratio_16bit`, the packed
    part over the 16-bit size of the tokens it holds (the ratio a sequence much longer than the residual
    approaches); and `ms_per_token` (decode only; a timing, not reproducible).
    """
    from kvlab.measure.formula import bytes_per_token_per_layer

    per_token_layer_16bit = bytes_per_token_per_layer(model.config, torch.float16)
    reference = teacher_forced(model, input_ids, prefill_tokens, cache="dynamic")
    runs = {"dynamic": reference}
    rows = [_row("dynamic", {}, reference, reference, per_token_layer_16bit)]
    for label, options in configs.items():
        runs[label] = teacher_forced(model, input_ids, prefill_tokens, cache="quantized", **options)
        rows.append(_row(label, options, reference, runs[label], per_token_layer_16bit))
    return rows, runs


def _row(label: str, options: dict, reference: TeacherForced, run: TeacherForced, per_token_layer_16bit: int) -> dict:
    final = run.trace.final_layers()
    tokens_16bit = sum(e["logical_length"] for e in final) * per_token_layer_16bit
    quantized_16bit = sum(e["quantized_tokens"] for e in final) * per_token_layer_16bit
    packed = sum(e["packed_bytes"] for e in final)
    cache_bytes = sum(e["bytes_held"] for e in final)
    positions = max(len(run.targets) - 1, 1)
    return {
        "config": label,
        **options,
        **compare(reference, run),
        "cache_bytes": cache_bytes,
        "packed_bytes": packed,
        "residual_bytes": sum(e["residual_bytes"] for e in final),
        "memory_ratio_16bit": cache_bytes / tokens_16bit,
        "packed_ratio_16bit": packed / quantized_16bit if quantized_16bit else cache_bytes / tokens_16bit,
        "flushes": run.trace.summary()["flushes"],
        "ms_per_token": 1e3 * run.decode_seconds / positions,
    }
