"""How much a cache changes what the model says, against a DynamicCache (or no cache) on the same tokens: greedy
token agreement, KL(reference || cache) of the next-token distributions under teacher forcing (nats), perplexity.

Teacher forcing decodes one token per forward after a prefill, because that is when a cache is read: a
QuantizedCache attends to full-precision keys during the prefill and to its packed copy only afterwards.
`teacher_forced_chunk` gets the same predictions in two forwards (the prefill, then every scored token at once)
where causal attention lets each token see what it would have seen decoding: a DynamicCache; a QuantizedCache
whose residual the chunk does not fill (the packed prefill is dequantized as for each step, the chunk's own
tokens read in full precision as the residual would hold them); fp8, which reads every token back from 8 bits.

Numerics: a float32 log-softmax over a vocabulary sums to 1 only within ~ vocab x float32 eps, as large as the KL
of a good 8-bit cache (the KL came out negative), so log-softmax is taken in float64 and both sides renormalised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.cache_kinds import quantized_backend
from kvlab.caches import make_cache
from kvlab.i18n import _
from kvlab.measure.timing import Stopwatch
from kvlab.recording.trace import Trace


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first differing token, None if the shorter one is a prefix of the other."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None


def token_agreement(reference: list[int], other: list[int]) -> dict:
    """Matching tokens of two greedy generations over the shorter one's length: tokens compared, common_prefix
    (identical tokens before the first difference), matches (position-wise), agreement (1.0 with nothing to compare)."""
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
    """Log-probabilities predicting ids[prefill:], shape (len - prefill, vocab): a prefill forward then one forward
    per token, or without a cache (`cache=None`) one exact forward over the whole window. `timing["decode_seconds"]`,
    if given, receives the time of the one-token forwards."""
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
    """Log-probabilities of `logits` (..., vocab), summed in float64 (each value rounded once) and stored in float32:
    the bench keeps one (positions, vocab) tensor per configuration (262,144 ids for Gemma 3)."""
    if logits.device.type == "mps":  # Apple's GPU has no float64; `kl_per_position` renormalises in float64
        return torch.log_softmax(logits.float(), dim=-1)
    return torch.log_softmax(logits.double(), dim=-1).float()


def _float64(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in float64, on the CPU when its device has no float64 (MPS)."""
    return tensor.cpu().double() if tensor.device.type == "mps" else tensor.double()


def perplexity(log_probs: torch.Tensor, targets: torch.Tensor) -> float:
    """exp(mean negative log-likelihood in nats) of `targets` (n,) under `log_probs` (n, vocab)."""
    return math.exp(float(-_float64(log_probs.gather(-1, targets.reshape(-1, 1))).mean()))


def kl_per_position(reference: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """KL(reference || other) at each position, both log-probabilities (n, vocab), in nats: shape (n,), float64.

    Both sides are renormalised in float64 first, so the KL is >= 0 (Gibbs) up to the rounding of a vocab-long sum,
    which the clamp at 0 removes. Rows go `KL_ROWS` at a time so the float64 copies stay small."""
    if reference.shape != other.shape:
        raise ValueError(
            _("KL needs two log-probability tensors of one shape; got {reference_shape} and {other_shape}").format(
                reference_shape=tuple(reference.shape), other_shape=tuple(other.shape)
            )
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
    """Mean over positions of `kl_per_position`, in nats."""
    return float(kl_per_position(reference, other).mean())


@dataclass
class TeacherForced:
    log_probs: torch.Tensor  # (positions, vocab): log-softmax of the logits predicting each scored token
    targets: torch.Tensor  # (positions,): the tokens that actually follow
    trace: Trace | None  # what the cache did while scoring
    decode_seconds: float = 0.0  # the forwards after the prefill

    @property
    def perplexity(self) -> float:
        return perplexity(self.log_probs, self.targets)


def teacher_forced(
    model, input_ids: torch.Tensor, prefill_tokens: int, cache: str = "dynamic", **options
) -> TeacherForced:
    """Prefill `prefill_tokens` of `input_ids` (1, n), then feed the rest one token per forward through a cache of
    kind `cache`, scoring the n - prefill_tokens next tokens."""
    _check_prefill(prefill_tokens, input_ids.shape[-1])
    input_ids = input_ids.to(model.device)
    trace = Trace()
    cache_object = make_cache(cache, model.config, trace=trace, **options)  # None for "none"
    timing = {"decode_seconds": 0.0}
    log_probs = teacher_forced_logits(model, input_ids, prefill_tokens, cache_object, timing)  # (positions, vocab)
    trace = trace if cache_object is not None else None
    return TeacherForced(log_probs, input_ids[0, prefill_tokens:].clone(), trace, timing["decode_seconds"])


def teacher_forced_chunk(
    model, input_ids: torch.Tensor, prefill_tokens: int, cache: str = "dynamic", **options
) -> TeacherForced:
    """`teacher_forced` in two forwards: the prefill, then every remaining token but the last at once
    (`decode_seconds` is that forward's time). Refuses a quantized residual the chunk would fill (a flush)."""
    n = input_ids.shape[-1]
    _check_prefill(prefill_tokens, n)
    if cache not in ("dynamic", "quantized"):
        raise ValueError(
            _("chunked teacher forcing is exact for 'dynamic' and 'quantized' caches; got {cache!r}").format(
                cache=cache
            )
        )
    chunk = n - prefill_tokens - 1
    backend = quantized_backend(cache, options)  # None for dynamic; a backend with a residual flushes it
    residual_length = options.get("residual_length", backend.defaults.get("residual_length")) if backend else None
    if backend is not None and backend.keeps_residual and chunk >= residual_length:
        raise ValueError(
            _(
                "a {chunk}-token chunk fills the {residual_length}-token residual (a flush), which decoding one token "
                "at a time would do part-way; score fewer tokens or use quality.teacher_forced"
            ).format(chunk=chunk, residual_length=residual_length)
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
    _check_same_tokens(reference, other)
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
    model,
    input_ids: torch.Tensor,
    prefill_tokens: int,
    configs: dict[str, dict],
    chunked: bool = False,
    reference_label: str = "dynamic",
) -> tuple[list[dict], dict]:
    """Teacher-force `input_ids` through a DynamicCache and a QuantizedCache per entry of `configs` ({label: quantized
    options}), one per token or, `chunked`, with `teacher_forced_chunk`: (rows, {label: TeacherForced}); the
    DynamicCache's row and run are labelled `reference_label`.

    A row: the `compare` measures; the cache's bytes at the end; `memory_ratio_16bit` (the cache over a 16-bit cache
    of the same tokens); `packed_ratio_16bit` (the packed part over the 16-bit size of its tokens: what a sequence
    much longer than the residual approaches); `ms_per_token` (chunked: the scoring forward's, not a decode speed).
    """
    from kvlab.measure.formula import bytes_per_token_per_layer

    score = teacher_forced_chunk if chunked else teacher_forced
    per_token_layer_16bit = bytes_per_token_per_layer(model.config, torch.float16)
    reference = score(model, input_ids, prefill_tokens, cache="dynamic")
    runs = {reference_label: reference}
    rows = [_row(reference_label, {}, reference, reference, per_token_layer_16bit)]
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


def per_position(reference: TeacherForced, other: TeacherForced) -> list[dict]:
    """What `compare` averages, position by position: the reference's two likeliest tokens and the gap between
    their log-probabilities (`margin`, nats: a near tie, which a small change in the cache can flip), `other`'s
    likeliest token and whether it is the reference's (`same`), KL(reference || other) there, and `target_shift`,
    how far `other` moved the log-probability of the token that actually follows (nats; `other`'s perplexity is
    the reference's times exp(-mean target_shift))."""
    _check_same_tokens(reference, other)
    p, q = reference.log_probs, other.log_probs  # (positions, vocab)
    top2 = p.topk(2, dim=-1)  # (positions, 2): values and indices
    kl = kl_per_position(p, q)
    targets = reference.targets.reshape(-1, 1).to(p.device)
    shift = (_float64(q.gather(-1, targets)) - _float64(p.gather(-1, targets))).flatten()
    picks = q.argmax(-1)
    return [
        {
            "position": i,
            "reference_top2": (int(top2.indices[i, 0]), int(top2.indices[i, 1])),
            "margin": float(top2.values[i, 0] - top2.values[i, 1]),
            "pick": int(picks[i]),
            "same": int(picks[i]) == int(top2.indices[i, 0]),
            "kl": float(kl[i]),
            "target_shift": float(shift[i]),
        }
        for i in range(p.shape[0])
    ]


def _check_prefill(prefill_tokens: int, n: int) -> None:
    """A teacher-forced run scores the tokens after its prefill: at least one token prefilled, at least one scored."""
    if not 1 <= prefill_tokens < n:
        raise ValueError(
            _("prefill_tokens must be between 1 and {last} for a {n}-token input; got {prefill_tokens}").format(
                last=n - 1, n=n, prefill_tokens=prefill_tokens
            )
        )


def _check_same_tokens(reference: TeacherForced, other: TeacherForced) -> None:
    """Two runs compare position by position only when they scored the same tokens."""
    if reference.log_probs.shape != other.log_probs.shape or not torch.equal(reference.targets, other.targets):
        raise ValueError(_("compare needs two teacher-forced runs over the same tokens"))
