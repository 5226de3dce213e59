"""`kvlab.run` with two additions the explorer needs: a callback per token and a Stop switch.

It is `kvlab.run` (same validation, cache and greedy settings), with
- a transformers streamer reports every new token while the model works, so plots and text update live;
- a `StoppingCriteria` ends generation cleanly when Stop is pressed: `generate` finishes the step in progress
  (it checks its criteria before streaming a token, so one more token may arrive), returns the tokens so far,
  and the trace keeps every update up to that point;
- `past_recording` calls `cache.activate_past_recording()` before the first token, so sliding-window layers
  keep their evicted tokens until a crop (the cache guide's rule for rolling back a sliding cache).

`generate_run` is how the explorer's session runs a kind `generate` builds (`kvlab.explorer.kinds` starts it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from kvlab import _compat
from kvlab.explorer.prompts import encode_prompt
from kvlab.explorer.run_values import Run
from kvlab.recorded_run import RunResult, run


class TokenStreamer(_compat.BaseStreamer):
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


def generate_traced(
    model,
    tokenizer,
    input_ids: torch.Tensor,
    cache: str,
    options: dict,
    max_new_tokens: int,
    on_token: Callable[[list[int]], None] | None = None,
    stop: threading.Event | None = None,
    **run_kwargs,
) -> RunResult:
    """`kvlab.run(model, tokenizer, input_ids, cache, max_new_tokens, **options)` with a per-token callback
    and a Stop switch; `run_kwargs` are the rest of `kvlab.run`'s (`trace`, `past_recording`)."""
    # input_ids: (1, prompt_tokens)
    stop = stop or threading.Event()
    generate_kwargs = {
        "streamer": TokenStreamer(on_token),
        "stopping_criteria": StoppingCriteriaList([StopSwitch(stop)]),
    }
    result = run(
        model,
        tokenizer,
        input_ids,
        cache=cache,
        max_new_tokens=max_new_tokens,
        generate_kwargs=generate_kwargs,
        **run_kwargs,
        **options,
    )
    result.trace.meta["stopped"] = stop.is_set()
    return result


def generate_run(run: Run, model, tokenizer, on_token: Callable[[Run], None] | None, stop: threading.Event) -> None:
    """A kind `generate` builds, run for the explorer: `generate_traced`, recording into `run.trace` as it goes (the
    live plots read it) and reporting each token as `on_token(run)`."""
    request = run.request
    ids = encode_prompt(tokenizer, request.prompt, request.prompt_tokens, chat=request.chat)  # (1, n)
    run.prompt_tokens = int(ids.shape[-1])

    def token(new_ids: list[int]) -> None:
        run.new_ids = new_ids
        if on_token is not None:
            on_token(run)

    run.result = generate_traced(
        model,
        tokenizer,
        ids,
        request.cache,
        request.options,
        request.max_new_tokens,
        token,
        stop,
        past_recording=request.past_recording,
        trace=run.trace,
    )
