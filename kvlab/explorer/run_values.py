"""The explorer's run values: what a learner asked for (`RunRequest`) and what came of it (`Run`).

Torch-free, below every other explorer module: the controls make a request before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvlab.errors import KvlabEnvironmentError, KvlabUserError
from kvlab.i18n import C_, _, cache_kind_label

if TYPE_CHECKING:
    from kvlab.recorded_run import RunResult
    from kvlab.recording.trace import Trace

# What a learner's input or the machine can cause (a bad option, a damaged model, a full disk): one line, never a
# traceback.
USER_ERRORS = (KvlabUserError, ValueError, KvlabEnvironmentError, OSError)


def _trace(events: list[dict] | None = None, meta: dict | None = None) -> Trace:
    from kvlab.recording.trace import Trace  # imports torch, which the controls must not wait for

    return Trace(events, meta)


@dataclass
class RunRequest:
    model: str = "smollm2"
    dtype: str = "float32"
    cache: str = "dynamic"
    options: dict = field(default_factory=dict)
    past_recording: bool = False
    prompt: str = "The KV cache"
    prompt_tokens: int = 0  # 0: the text as is; n > 0: repeated or cut to exactly n tokens
    chat: bool = False
    max_new_tokens: int = 16

    def label(self) -> str:
        """ "smollm2 · static (max_cache_len=64)": the kind in the reader's words ("estático"), options as typed."""
        parts = [f"{k}={v}" for k, v in self.options.items()]
        parts += [C_("run label", "past recording")] if self.past_recording else []
        kind = C_("cache menu", "none") if self.cache == "none" else cache_kind_label(self.cache)
        return f"{self.model} · {kind}" + (f" ({', '.join(parts)})" if parts else "")


@dataclass
class Run:
    """A run in progress or finished: its request, its live trace and, once done, the `RunResult`."""

    request: RunRequest
    trace: Trace = field(default_factory=_trace)
    new_ids: list[int] = field(default_factory=list)
    result: RunResult | None = None
    error: str | None = None
    prompt_tokens: int = 0
    done: bool = False  # set by the generating thread once `generate` has returned (or failed)
    traceback: str | None = None  # set with `error` when the failure is a bug, not a user's mistake
    loaded_from: str | None = None  # the file name of a run loaded from a saved trace (no model, no cache object)
    new_tokens_loaded: int | None = None
    crop_bytes: dict | None = None  # the last crop's effect on storage: n, bytes before and after, bytes kept by views

    @property
    def label(self) -> str:
        loaded = _(" [loaded from {file}]").format(file=self.loaded_from) if self.loaded_from else ""
        return self.request.label() + loaded

    @property
    def new_tokens(self) -> int:
        if self.new_tokens_loaded is not None:
            return self.new_tokens_loaded
        return len(self.new_ids) if self.result is None else len(self.result.generated_token_ids)

    def snapshot(self) -> Trace:
        """A copy of the trace that the generating thread cannot change under the reader."""
        return _trace(self.trace.events, self.trace.meta)

    def bytes_now(self) -> int:
        return sum(r["bytes_held"] for r in self.layer_rows())

    def layer_rows(self) -> list[dict]:
        """What each layer holds now: read from the cache object (so crops show), else the trace's last updates."""
        cache = self.result.cache_object if self.result is not None else None
        if cache is None or self.result.trace.crops == []:
            return [dict(row) for row in self.snapshot().final_layers()]
        from kvlab.recording.layer_kinds import layer_kind_at
        from kvlab.recording.layer_state import read_layer  # torch: imported by the run that made the cache

        kinds = getattr(cache, "_kvlab_layer_kinds", [])
        return [
            {"layer_idx": i, "role": "self", **read_layer(layer, layer_kind_at(kinds, i, layer)).as_dict()}
            for i, layer in enumerate(cache.layers)
        ]
