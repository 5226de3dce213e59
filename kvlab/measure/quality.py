"""How much a cache changes what the model says, measured against a DynamicCache (or no cache) on the same tokens.

Three measures, from coarse to fine:
- greedy token agreement: generate freely with both caches and count the tokens that match (and the length of
  the common prefix: after the first different token the two texts drift apart for good);
- logit KL divergence: feed both caches the *same* tokens (teacher forcing) and compare the next-token
  distributions at every position, KL(reference || cache), in nats;
- perplexity of real text through the cache: exp(mean negative log-likelihood of each next token).

Teacher forcing (`teacher_forced_logits`, used by the notebooks' `teacher_forced` and by `kvlab bench`) decodes
one token per forward after a prefill, because that is when a cache is read: a QuantizedCache attends to
full-precision keys during the prefill and to its packed copy only afterwards. Without a cache it is one forward
over the whole window, the exact reference: every position attends to every earlier token, nothing is stored.

`teacher_forced_chunk` gets the same predictions in two forwards, the prefill and then every scored token at once,
for the caches whose later tokens are kept as they are computed, because causal attention lets each token see
exactly what it would have seen decoding:
- DynamicCache: the earlier tokens in full precision either way;
- QuantizedCache with a residual (hqq, quanto): the packed prefill is dequantized for the chunk as for each decode
  step, and the chunk's own earlier tokens are read in full precision, as the residual would hold them. This holds
  only while the chunk does not fill the residual (no flush), so that is checked;
- fp8: every token, the chunk's own included, is read back from its 8-bit copy, as each decode step does.
`sweep(..., chunked=True)` gives the same rows that way, up to floating-point summation order, for a fraction of
the time; what it does not give is decode speed.

Numerics: the log-softmax is taken in float64 and kept in float32 (`log_softmax_float32`), and the KL is summed in
float64 after renormalising both sides (`kl_per_position`). A float32 log-softmax over a vocabulary does not sum
to exactly 1, and that normalisation error (~ vocab x float32 eps) is as large as the KL of a good 8-bit cache, so
summed as it is the KL came out negative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.measure.timing import Stopwatch
from kvlab.recording.trace import Trace


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first differing token, None if the shorter one is a prefix of the other."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None


def token_agreement(reference: list[int], other: list[int]) -> dict:
    """Matching tokens of two greedy generations, over the shorter one's length: {"tokens": compared,
    "common_prefix": identical tokens before the first difference, "matches": position-wise matches,
    "agreement": matches / tokens (1.0 when there is nothing to compare)}."""
    n = min(len(reference), len(other))
    divergence = first_divergence(reference, other)
    matches = sum(1 for a, b in zip(reference[:n], other[:n]) if a == b)
    return {
        "tokens": n,
        "common_prefix": n if divergence is None else divergence,
        "matches": matches,
        "agreement": matches / n if n else 1.0,
    }


@torch.inference_mode()
def teacher_forced_logits(model, ids: torch.Tensor, prefill: int, cache, timing: dict | None = None) -> torch.Tensor:
    """Log-probabilities predicting ids[prefill:], shape (len - prefill, vocab); `cache=None` = no cache.

    With a cache: one prefill forward, then one forward per token. Without: one forward over the whole window.
    When `timing` is given, `timing["decode_seconds"]` receives the wall time of the one-token forwards (not the
    prefill).
    """
    ids = ids.to(model.device)  # (1, length)
    if cache is None:
        logits = model(ids, use_cache=False).logits[0, prefill - 1 : -1]  # (length - prefill, vocab)
        return log_softmax_float32(logits)
    steps = [model(ids[:, :prefill], **{_compat.CACHE_KWARG: cache}, use_cache=True).logits[0, -1]]
    with Stopwatch() as watch:
        for t in range(prefill, ids.shape[-1] - 1):
            out = model(ids[:, t : t + 1], **{_compat.CACHE_KWARG: cache}, use_cache=True)
            steps.append(out.logits[0, -1])
    if timing is not None:
        timing["decode_seconds"] = watch.seconds
    return log_softmax_float32(torch.stack(steps))  # (length - prefill, vocab)


def log_softmax_float32(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of `logits` (..., vocab), computed in float64 and stored in float32.

    Float64 for the sum over the vocabulary, so each value is its exact log-probability rounded once; float32 to
    store, because the bench keeps one (positions, vocab) tensor per configuration (262,144 ids for Gemma 3)."""
    if not _has_float64(logits.device):  # Apple's GPU: float32 here; `kl_per_position` renormalises in float64
        return torch.log_softmax(logits.float(), dim=-1)
    return torch.log_softmax(logits.double(), dim=-1).float()


def _has_float64(device: torch.device) -> bool:
    return device.type != "mps"


def _float64(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in float64, on the CPU when its device has no float64 (MPS)."""
    return tensor.double() if _has_float64(tensor.device) else tensor.cpu().double()


def mean_nll(log_probs: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean negative log-likelihood of `targets` (n,) under `log_probs` (n, vocab), in nats."""
    return float(-_float64(log_probs.gather(-1, targets.reshape(-1, 1))).mean())


def perplexity(log_probs: torch.Tensor, targets: torch.Tensor) -> float:
    """exp(mean negative log-likelihood) of `targets` (n,) under `log_probs` (n, vocab)."""
    return math.exp(mean_nll(log_probs, targets))


def kl_per_position(reference: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """KL(reference || other) at each position, both log-probabilities (n, vocab), in nats: shape (n,), float64.

    Both sides are renormalised in float64 first (a no-op in exact arithmetic): stored float32 log-probabilities
    sum to 1 only within ~ vocab x float32 eps, which alone shifts the KL by as much, either way. Renormalised,
    each is a distribution and the KL is >= 0 (Gibbs' inequality) up to float64 rounding of a vocab-long sum;
    that rounding is what the clamp at 0 removes, so no position reads below zero. Rows go `KL_ROWS` at a time,
    so the float64 copies stay small next to a 262,144-id vocabulary."""
    if reference.shape != other.shape:
        raise ValueError(
            f"KL needs two log-probability tensors of one shape; got {tuple(reference.shape)} and {tuple(other.shape)}"
        )
    rows = reference.reshape(-1, reference.shape[-1]), other.reshape(-1, other.shape[-1])  # any leading shape
    kl = [_kl_rows(p, q) for p, q in zip(rows[0].split(KL_ROWS), rows[1].split(KL_ROWS))]
    return torch.cat(kl).reshape(reference.shape[:-1])


KL_ROWS = 64  # positions per float64 block in kl_per_position: 64 x 262,144 x 8 bytes = 128 MiB a copy


def _kl_rows(reference: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    p = torch.log_softmax(_float64(reference), dim=-1)
    q = torch.log_softmax(_float64(other), dim=-1)
    terms = torch.nn.functional.kl_div(q, p, reduction="none", log_target=True)  # exp(p) * (p - q)
    terms = terms.masked_fill(p == -math.inf, 0.0)  # a token the reference rules out adds 0, not 0 * inf = nan
    return terms.sum(-1).clamp(min=0.0)


def kl_divergence(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Mean over positions of KL(reference || other), both log-probabilities (n, vocab), in nats (>= 0: see
    `kl_per_position`)."""
    return float(kl_per_position(reference, other).mean())


@dataclass
class TeacherForced:
    log_probs: torch.Tensor  # (positions, vocab): log-softmax of the logits predicting each scored token
    targets: torch.Tensor  # (positions,): the tokens that actually follow
    trace: Trace | None  # what the cache did while scoring
    decode_seconds: float = 0.0  # wall time of the one-token forwards after the prefill (not the prefill)

    @property
    def nll(self) -> float:
        return mean_nll(self.log_probs, self.targets)

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


def teacher_forced_chunk(
    model, input_ids: torch.Tensor, prefill_tokens: int, cache: str = "dynamic", **options
) -> TeacherForced:
    """Prefill `prefill_tokens` of `input_ids` (1, n) into a cache of kind `cache` ("dynamic" or "quantized",
    with `options`), then feed the remaining tokens but the last in one forward. Scores n - prefill_tokens
    positions, like `teacher_forced`; `decode_seconds` is the time of that one scoring forward. Refuses a
    quantized residual the chunk would fill (a flush)."""
    n = input_ids.shape[-1]
    if not 1 <= prefill_tokens < n:
        raise ValueError(f"prefill_tokens must be between 1 and {n - 1} for a {n}-token input; got {prefill_tokens}")
    if cache not in ("dynamic", "quantized"):
        raise ValueError(f"chunked teacher forcing is exact for 'dynamic' and 'quantized' caches; got {cache!r}")
    chunk = n - prefill_tokens - 1
    residual_length = options.get("residual_length", _compat.QUANTIZED_DEFAULTS["residual_length"])
    if cache == "quantized" and options.get("backend") != "fp8" and chunk >= residual_length:
        raise ValueError(
            f"a {chunk}-token chunk fills the {residual_length}-token residual (a flush), which "
            "decoding one token at a time would do part-way; score fewer tokens or use "
            "quality.teacher_forced"
        )
    trace = Trace()
    cache_object = make_cache(cache, model.config, trace=trace, **options)
    ids = input_ids.to(model.device)  # (1, n)
    kwargs = {_compat.CACHE_KWARG: cache_object, "use_cache": True}
    with torch.no_grad():
        first = model(ids[:, :prefill_tokens], **kwargs).logits[0, -1:]  # (1, vocab): predicts token prefill
        with Stopwatch() as watch:
            rest = model(ids[:, prefill_tokens:-1], **kwargs).logits[0] if chunk else first[:0]  # (chunk, vocab)
    log_probs = log_softmax_float32(torch.cat([first, rest]))  # (n - prefill_tokens, vocab)
    return TeacherForced(log_probs, input_ids[0, prefill_tokens:].clone(), trace, watch.seconds)


def compare(reference: TeacherForced, other: TeacherForced) -> dict:
    """KL(reference || other) averaged over positions, top-1 agreement, and both perplexities."""
    if reference.log_probs.shape != other.log_probs.shape or not torch.equal(reference.targets, other.targets):
        raise ValueError("compare needs two teacher-forced runs over the same tokens")
    p, q = reference.log_probs, other.log_probs
    kl = kl_per_position(p, q)  # (positions,)
    top1 = (p.argmax(-1) == q.argmax(-1)).float()
    return {
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "top1_agreement": float(top1.mean()),
        "perplexity": other.perplexity,
        "reference_perplexity": reference.perplexity,
    }


def sweep(
    model, input_ids: torch.Tensor, prefill_tokens: int, configs: dict[str, dict], chunked: bool = False
) -> tuple[list[dict], dict]:
    """Teacher-force `input_ids` through a DynamicCache and through a QuantizedCache per entry of `configs`
    ({label: quantized options}); one row per configuration, plus {label: TeacherForced} (with "dynamic").
    `chunked=True` scores with `teacher_forced_chunk` (two forwards per configuration instead of one per token).

    Row fields: the `compare` measures; the cache at the end (cache_bytes, packed_bytes, residual_bytes);
    `memory_ratio_16bit`, the cache over a 16-bit cache of the same tokens; `packed_ratio_16bit`, the packed
    part over the 16-bit size of the tokens it holds (the ratio a sequence much longer than the residual
    approaches); and `ms_per_token` (decode only; a timing, not reproducible; chunked, the scoring forward's
    time per position, not a decode speed).
    """
    from kvlab.measure.formula import bytes_per_token_per_layer

    score = teacher_forced_chunk if chunked else teacher_forced
    per_token_layer_16bit = bytes_per_token_per_layer(model.config, torch.float16)
    reference = score(model, input_ids, prefill_tokens, cache="dynamic")
    runs = {"dynamic": reference}
    rows = [_row("dynamic", {}, reference, reference, per_token_layer_16bit)]
    for label, options in configs.items():
        runs[label] = score(model, input_ids, prefill_tokens, cache="quantized", **options)
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
