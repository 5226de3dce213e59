"""`kvlab.run` with three additions the explorer needs: a callback per token, a Stop switch, and past recording.

It builds the same validated, instrumented cache and calls `generate` with the same greedy settings as
`kvlab.run` (the tests check that the slot counts agree), but
- a transformers streamer reports every new token while the model works, so plots and text update live;
- a `StoppingCriteria` ends generation cleanly when Stop is pressed: `generate` finishes the step in progress
  (it checks its criteria before streaming a token, so one more token may arrive), returns the tokens so far,
  and the trace keeps every update up to that point;
- `past_recording` calls `cache.activate_past_recording()` before the first token, so sliding-window layers
  keep their evicted tokens until a crop (the cache guide's rule for rolling back a sliding cache).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.run import RunResult, validate
from kvlab.trace import Trace

# Kinds whose layers can record the past (DynamicCache-based: their sliding layers grow until a crop).
PAST_RECORDING_KINDS = ("dynamic", "offloaded")


class TokenStreamer(BaseStreamer):
    """Calls `on_token(new_ids)` after each generated token. `generate` first puts the prompt: skipped."""

    def __init__(self, on_token: Callable[[list[int]], None] | None = None):
        self.on_token = on_token
        self.new_ids: list[int] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True  # the prompt ids, (1, prompt_tokens)
            return
        self.new_ids.extend(int(i) for i in value.reshape(-1).tolist())  # (1,) per decoding step
        if self.on_token is not None:
            self.on_token(list(self.new_ids))

    def end(self) -> None:
        pass


class StopSwitch(StoppingCriteria):
    """Stops `generate` after the current step once `event` is set."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        # input_ids: (batch, tokens so far) -> one bool per sequence
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def check_past_recording(cache: str, past_recording: bool) -> None:
    from kvlab.caches import CacheOptionError

    if past_recording and cache not in PAST_RECORDING_KINDS:
        raise CacheOptionError(
            f"past recording is for {' and '.join(PAST_RECORDING_KINDS)} caches (DynamicCache layers); a {cache!r} "
            "cache cannot keep evicted tokens for a later crop."
        )


def generate_traced(model, tokenizer, input_ids: torch.Tensor, cache: str, options: dict, max_new_tokens: int,
                    past_recording: bool = False, trace: Trace | None = None,
                    on_token: Callable[[list[int]], None] | None = None,
                    stop: threading.Event | None = None) -> RunResult:  # fmt: skip
    """Greedy generation like `kvlab.run(model, tokenizer, input_ids, cache, max_new_tokens, **options)`."""
    # input_ids: (1, prompt_tokens)
    check_past_recording(cache, past_recording)
    given = validate(model.config, cache, options, input_ids.shape[-1], max_new_tokens)
    trace = trace if trace is not None else Trace()
    cache_object = make_cache(cache, model.config, trace=trace, **given)
    if past_recording:
        cache_object.activate_past_recording()
    pad = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None \
        else model.config.eos_token_id  # fmt: skip
    kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False, "pad_token_id": pad,
              "streamer": TokenStreamer(on_token),
              "stopping_criteria": StoppingCriteriaList([StopSwitch(stop or threading.Event())])}  # fmt: skip
    if cache_object is None:
        kwargs["use_cache"] = False
    else:
        kwargs[_compat.CACHE_KWARG] = cache_object
    started = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    seconds = time.perf_counter() - started
    new_ids = output[0, input_ids.shape[-1]:].tolist()
    text = tokenizer.decode(new_ids, skip_special_tokens=True) if tokenizer is not None else ""
    name = getattr(model, "kvlab_name", model.config.model_type)
    from kvlab.layer_state import layer_kinds

    trace.meta.update({"model": name, "cache": cache, "options": given, "past_recording": past_recording,
                       "dtype": str(model.dtype).replace("torch.", ""), "prompt_tokens": int(input_ids.shape[-1]),
                       "new_tokens": len(new_ids), "seconds": seconds, "stopped": bool(stop and stop.is_set()),
                       "tokens_per_s": len(new_ids) / seconds if seconds > 0 else 0.0,
                       "layer_kinds": layer_kinds(model.config)})  # fmt: skip
    return RunResult(name, cache, given, trace.meta["dtype"], int(input_ids.shape[-1]), new_ids, text, seconds,
                     trace, cache_object)  # fmt: skip
