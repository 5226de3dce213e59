"""Teacher forcing in two forwards: the prefill, then every scored token at once.

`kvlab.measure.quality.teacher_forced` feeds the scored tokens one per forward, as decoding does. For the caches
whose later tokens are kept as they are computed, one forward over all of them gives the same predictions for
a fraction of the cost, because causal attention lets each token see exactly what it would have seen decoding:

- DynamicCache: the earlier tokens in full precision either way.
- QuantizedCache with a residual (hqq, quanto): the packed prefill is dequantized for the chunk as for each
  decode step, and the chunk's own earlier tokens are read in full precision, as the residual would hold them.
  This holds only while the chunk does not fill the residual (no flush), so that is checked.
- fp8: every token, the chunk's own included, is read back from its 8-bit copy, as each decode step does.

Same rows as `quality.sweep` (the same `compare` measures and byte ratios), up to floating-point summation
order. What it does not give is decode speed: `decode_seconds` is the time of the one scoring forward.
"""

from __future__ import annotations

import torch

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.measure import quality
from kvlab.measure.timing import Stopwatch
from kvlab.recording.trace import Trace

DEFAULT_RESIDUAL_LENGTH = 128  # transformers' QuantizedCache default


def teacher_forced_chunk(
    model, input_ids: torch.Tensor, prefill_tokens: int, cache: str = "dynamic", **options
) -> quality.TeacherForced:
    """Prefill `prefill_tokens` of `input_ids` (1, n) into a cache of kind `cache` ("dynamic" or "quantized",
    with `options`), then feed the remaining tokens but the last in one forward. Scores n - prefill_tokens
    positions, like `quality.teacher_forced`. Refuses a quantized residual the chunk would fill (a flush)."""
    n = input_ids.shape[-1]
    if not 1 <= prefill_tokens < n:
        raise ValueError(f"prefill_tokens must be between 1 and {n - 1} for a {n}-token input; got {prefill_tokens}")
    if cache not in ("dynamic", "quantized"):
        raise ValueError(f"chunked teacher forcing is exact for 'dynamic' and 'quantized' caches; got {cache!r}")
    chunk = n - prefill_tokens - 1
    residual_length = options.get("residual_length", DEFAULT_RESIDUAL_LENGTH)
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
    log_probs = quality.log_softmax_float32(torch.cat([first, rest]))  # (n - prefill_tokens, vocab)
    return quality.TeacherForced(log_probs, input_ids[0, prefill_tokens:].clone(), trace, watch.seconds)


def sweep(model, input_ids: torch.Tensor, prefill_tokens: int, configs: dict[str, dict]) -> tuple[list[dict], dict]:
    """`quality.sweep` with `teacher_forced_chunk`: a DynamicCache row ("dynamic") then one row per
    {label: quantized options}, with the same fields; `ms_per_token` is the scoring forward's time per
    position, not a decode speed."""
    from kvlab.measure.formula import bytes_per_token_per_layer

    per_token_layer_16bit = bytes_per_token_per_layer(model.config, torch.float16)
    reference = teacher_forced_chunk(model, input_ids, prefill_tokens, cache="dynamic")
    runs = {"dynamic": reference}
    rows = [quality._row("dynamic", {}, reference, reference, per_token_layer_16bit)]
    for label, options in configs.items():
        runs[label] = teacher_forced_chunk(model, input_ids, prefill_tokens, cache="quantized", **options)
        rows.append(quality._row(label, options, reference, runs[label], per_token_layer_16bit))
    return rows, runs
