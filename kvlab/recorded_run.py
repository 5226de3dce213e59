"""`run`: greedy generation with an instrumented cache, returning the tokens, the text and the trace.

The request is checked before the model runs (`kvlab.request`), so an impossible one costs nothing. A static kind
without `max_cache_len` is left to transformers' `generate` to size and build (through `kvlab.generate`), so it
matches transformers' allocation exactly.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from kvlab import _compat
from kvlab.cache_kinds import STATIC_KINDS, quantized_backend
from kvlab.caches.factory import build_cache
from kvlab.caches.quantized import ensure_quanto_extension
from kvlab.i18n import _
from kvlab.log import get_logger
from kvlab.measure.timing import Stopwatch
from kvlab.names import dtype_name, model_name
from kvlab.recording.trace import Trace
from kvlab.request import Request
from kvlab.rules import check
from kvlab.strategies.load import strategy_name
from kvlab.watched_generate import cache_device, generate

log = get_logger(__name__)

SUMMARY_KEYS = ("slots_allocated", "slots_live", "slots_masked", "waste_pct", "tokens_evicted", "flushes", "transfers")


def pad_token_id(tokenizer, model) -> int | None:
    """The pad token of every greedy `generate`: the tokenizer's, else the model's end-of-sequence token
    (transformers falls back to the same id itself, but warns on every call that it did)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    return pad if pad is not None else model.config.eos_token_id


@dataclass
class RunResult:
    model: str
    cache: str
    options: dict
    dtype: str
    prompt_tokens: int
    generated_token_ids: list[int]
    text: str
    seconds: float
    trace: Trace
    cache_object: object = field(default=None, repr=False)

    @property
    def no_cache(self) -> bool:
        """The model never used the Cache it was handed (GPT-1 keeps no past): the trace is empty, not a record."""
        return bool(self.trace.meta.get("no_cache"))

    @property
    def tokens_per_s(self) -> float:
        return len(self.generated_token_ids) / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        summary = self.trace.summary()
        return {
            "model": self.model,
            "cache": self.cache,
            "options": self.options,
            "dtype": self.dtype,
            "prompt_tokens": self.prompt_tokens,
            "generated_token_ids": self.generated_token_ids,
            "text": self.text,
            "seconds": round(self.seconds, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "peak_cache_bytes": summary["peak_bytes"],
            "final_cache_bytes": summary["final_bytes"],
            **{key: summary[key] for key in SUMMARY_KEYS},
            "layers": self.trace.layer_table(),
        }


def _takes_cache(model) -> bool:
    """Whether `model`'s forward names the keyword generate passes a cache under (`_compat.cache_kwarg`)."""
    return _compat.cache_kwarg(model) in inspect.signature(model.forward).parameters


def _tell_no_cache(trace: Trace, model, new_tokens: int) -> None:
    """One line, as `kvlab.watch` says it: generate handed the model a Cache it never filled."""
    model_type = getattr(model.config, "model_type", type(model).__name__)
    trace.meta.update(no_cache=True, model_type=model_type)
    log.warning(
        "%s",
        _(
            "{model_type} generated {tokens} tokens and used no transformers Cache (the model keeps its own past, or "
            "none): nothing was traced."
        ).format(model_type=model_type, tokens=new_tokens),
    )


def encode(tokenizer, prompt: str, chat: bool = False) -> torch.Tensor:
    """Prompt ids, shape (1, prompt_tokens). With `chat`, the model's chat template wraps a user turn."""
    if chat:
        if tokenizer.chat_template is None:
            raise ValueError(_("this model has no chat template; run without chat"))
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    return tokenizer(prompt, return_tensors="pt").input_ids


def run(
    model,
    tokenizer,
    prompt: str | torch.Tensor,
    cache: str | type = "dynamic",
    *,
    max_new_tokens: int = 32,
    chat: bool = False,
    trace: Trace | None = None,
    generate_kwargs: dict | None = None,
    **options,
) -> RunResult:
    """Greedy generation with an instrumented cache of cache kind `cache` ("none" disables the cache), or of a
    strategy: a transformers layer class of the user's, or "FILE.py:ClassName" (its options: the layer's arguments).

    `options` are the cache's (max_cache_len=64, backend="hqq", ...) and two of the request's:
    `past_recording=True` calls `cache.activate_past_recording()` first, so sliding layers keep what they would
    evict until the next crop (`crop(-n)` past the window); `allow_past_positions=True` generates past the model's
    max_position_embeddings (refused by default: transformers only warns). `generate_kwargs` go to `generate` as
    they are (a streamer, stopping criteria...). A quanto cache's one-time extension build happens before the
    clock starts.
    """
    if max_new_tokens < 1:
        raise ValueError(_("max_new_tokens must be at least 1; got {got!r}").format(got=max_new_tokens))
    input_ids = prompt if isinstance(prompt, torch.Tensor) else encode(tokenizer, prompt, chat=chat)
    input_ids = input_ids.to(model.device)  # (1, prompt_tokens), where the model is (a GPU, or the CPU)
    flags = {name: options.pop(name, False) for name in ("past_recording", "allow_past_positions")}
    past_recording = flags["past_recording"]
    request = Request(
        cache,
        options,
        model.config,
        prompt_tokens=input_ids.shape[-1],
        new_tokens=max_new_tokens,
        dtype=model.dtype,
        device=cache_device(model),
        generate_sizes=True,
        **flags,
    )
    given = check(request)
    trace = trace if trace is not None else Trace()
    kwargs = {
        "max_new_tokens": max_new_tokens,
        "do_sample": False,
        "pad_token_id": pad_token_id(tokenizer, model),
        "attention_mask": torch.ones_like(input_ids),
        **(generate_kwargs or {}),
    }
    sized_by_generate = cache in STATIC_KINDS and "max_cache_len" not in given
    # a model whose forward names no cache keyword (GPT-1) is handed generate's own cache, instrumented: one passed
    # by kvlab would be refused as an unused keyword
    sized_by_generate = sized_by_generate or (cache == "dynamic" and not _takes_cache(model))
    cache_object = None if sized_by_generate else build_cache(cache, request.facts, given, trace=trace)
    if past_recording:
        cache_object.activate_past_recording()
    if cache == "none":
        kwargs["use_cache"] = False
    elif cache_object is not None:
        kwargs[_compat.cache_kwarg(model)] = cache_object
    if (backend := quantized_backend(cache, given)) is not None and backend.builds_extension:
        ensure_quanto_extension(input_ids.device)  # its one-time build (about a minute) stays out of the timing
    with Stopwatch() as stopwatch, torch.inference_mode():  # one reading: the run's own tokens/s, not a comparison
        if sized_by_generate:  # transformers sizes and builds it, kvlab records it
            output, cache_object = generate(
                model,
                input_ids,
                cache_implementation=cache if cache != "dynamic" else None,
                cache_config=given,
                trace=trace,
                allow_past_positions=flags["allow_past_positions"],
                **kwargs,
            )
            if cache in STATIC_KINDS:
                given = {**given, "max_cache_len": _compat.static_cache_length(cache_object)}
        else:
            output = model.generate(input_ids, **kwargs)
    seconds = stopwatch.seconds
    # a decoder-only output repeats the prompt; an encoder-decoder one starts with the decoder start token
    first_new = 1 if model.config.is_encoder_decoder else input_ids.shape[-1]
    new_ids = output[0, first_new:].tolist()
    text = tokenizer.decode(new_ids, skip_special_tokens=True) if tokenizer is not None else ""
    cache = strategy_name(cache)  # a strategy's class name ("KeepEnds"); a kind's name stays
    prompt_tokens, dtype = int(input_ids.shape[-1]), dtype_name(model.dtype)
    result = RunResult(
        model_name(model), cache, given, dtype, prompt_tokens, new_ids, text, seconds, trace, cache_object
    )
    trace.meta.update(
        {
            "model": result.model,
            "cache_kind": cache,
            "options": given,
            "past_recording": past_recording,
            "dtype": dtype,
            "prompt_tokens": prompt_tokens,
            "new_tokens": len(new_ids),
            "seconds": seconds,
            "tokens_per_s": result.tokens_per_s,
            "layer_kinds": list(request.facts.layer_kinds),
        }
    )
    recorder = getattr(cache_object, "kvlab_recorder", None)
    if recorder is not None:
        recorder.read_outside()  # what the last forward kept beside the layers
    if cache != "none" and not trace.events:
        _tell_no_cache(trace, model, len(new_ids))
    return result
