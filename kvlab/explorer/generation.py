"""`kvlab.run` with what the explorer adds: a callback per token (a streamer) and a Stop switch.

Stop is a `StoppingCriteria`: `generate` finishes the step in progress (it checks its criteria before streaming a
token, so one more token may arrive), returns the tokens so far, and the trace keeps every update.
"""

from __future__ import annotations

import threading

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from kvlab import _compat
from kvlab.explorer.prompts import encode_prompt
from kvlab.explorer.run_values import Run
from kvlab.recorded_run import RunResult, run


class TokenStreamer(_compat.BaseStreamer):
    """Calls `on_token(new_ids)` after each generated token (not for the prompt, which `generate` puts first)."""

    def __init__(self, on_token=None):
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

    def __call__(self, input_ids: torch.Tensor, _scores, **kwargs) -> torch.Tensor:
        # input_ids: (batch, tokens so far) -> one bool per sequence
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def generate_traced(
    model, tokenizer, input_ids, cache, options: dict, max_new_tokens: int, on_token=None, stop=None, **run_kwargs
) -> RunResult:
    """`kvlab.run` calling `on_token(new_ids)` after each token, ended early once the `threading.Event` `stop` is
    set; `run_kwargs` are the rest of `kvlab.run`'s."""
    # input_ids: (1, prompt_tokens)
    stop = stop or threading.Event()
    watched = {"streamer": TokenStreamer(on_token), "stopping_criteria": StoppingCriteriaList([StopSwitch(stop)])}
    result = run(
        model,
        tokenizer,
        input_ids,
        cache,
        max_new_tokens=max_new_tokens,
        generate_kwargs=watched,
        **run_kwargs,
        **options,
    )
    result.trace.meta["stopped"] = stop.is_set()
    return result


def generate_run(run: Run, model, tokenizer, on_token, stop: threading.Event, cache=None) -> None:
    """`generate_traced`, recording into `run.trace` as it goes (the live plots read it), reporting `on_token(run)`;
    `cache` is what `kvlab.run` takes (an offered strategy's layer class), the request's kind name by default."""
    request = run.request
    ids = encode_prompt(tokenizer, request.prompt, request.prompt_tokens, chat=request.chat)  # (1, n)
    run.prompt_tokens = int(ids.shape[-1])

    def token(new_ids: list[int]) -> None:
        run.new_ids = new_ids
        if on_token is not None:
            on_token(run)

    cache = request.cache if cache is None else cache
    args = (model, tokenizer, ids, cache, request.options, request.max_new_tokens, token, stop)
    run.result = generate_traced(*args, past_recording=request.past_recording, trace=run.trace)
