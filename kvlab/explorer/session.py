"""`Session`: one run at a time in a background thread, its live partial trace, the comparison list, and crops.

The widget callbacks run on the kernel's main thread and must return at once (or the UI freezes), so `start`
only checks the request and launches a daemon thread; Stop sets an event that `generate` polls after every
token. Whatever happened (finished, stopped, failed), the thread ends by calling `on_done` (or `on_error`
with a one-line message), and the trace recorded so far is kept. What differs between cache kinds (how a request is
checked and run, whether Stop can end it, whether its cache can be cropped) is the kind's `ExplorerKind`
(`kvlab.explorer.kinds`); `generate_run` is how the kinds `generate` builds run.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from kvlab.caches.crop_rules import CacheCropError, removal_count
from kvlab.errors import KvlabEnvironmentError, KvlabUserError, one_line
from kvlab.explorer.generation import generate_traced
from kvlab.explorer.kinds import kind_of
from kvlab.explorer.models import ModelStore
from kvlab.explorer.prompts import encode_prompt
from kvlab.i18n import _
from kvlab.recorded_run import RunResult
from kvlab.recording.layer_state import read_layer
from kvlab.recording.storage import storage_bytes, view_bytes
from kvlab.recording.trace import Trace

# What a learner's input or the machine can cause (a bad option, a damaged model or KVLAB_HOME, a save_dir on a full
# disk): one line, never a traceback. The command line catches the same (kvlab/errors.py).
USER_ERRORS = (KvlabUserError, ValueError, KvlabEnvironmentError, OSError)


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
        parts = [f"{k}={v}" for k, v in self.options.items()] + (["past recording"] if self.past_recording else [])
        return f"{self.model} · {self.cache}" + (f" ({', '.join(parts)})" if parts else "")


@dataclass
class Run:
    """A run in progress or finished: its request, its live trace and, once done, the `RunResult`."""

    request: RunRequest
    trace: Trace = field(default_factory=Trace)
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
        return Trace(list(self.trace.events), dict(self.trace.meta))

    def bytes_now(self) -> int:
        """Bytes of storage the cache holds now (the table's "bytes now")."""
        return sum(r["bytes_held"] for r in self.layer_rows())

    def layer_rows(self) -> list[dict]:
        """What each layer holds now: read from the cache object (so crops show), else the trace's last updates."""
        cache = self.result.cache_object if self.result is not None else None
        if cache is None or self.result.trace.crops == []:
            return [dict(row) for row in self.snapshot().final_layers()]
        layer_kinds = getattr(cache, "_kvlab_layer_kinds", [])
        return [
            {
                "layer_idx": i,
                "role": "self",
                **read_layer(layer, layer_kinds[i] if i < len(layer_kinds) else "full").as_dict(),
            }
            for i, layer in enumerate(cache.layers)
        ]


class Session:
    def __init__(self, store: ModelStore | None = None):
        self.store = store if store is not None else ModelStore()
        self.current: Run | None = None
        self.comparison: list[Run] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- running ------------------------------------------------------------------------------------------------
    def check(self, request: RunRequest) -> None:
        """Every check that needs no model work; with the model already loaded, all of its kind's checks (for a kind
        `generate` builds, `kvlab.run`'s: the options, then the request: its cache fits in memory, its tokens in the
        model's positions). The kind's own rules are its `ExplorerKind.check`."""
        if request.max_new_tokens < 1:
            raise ValueError(_("max new tokens must be at least 1; got {got}").format(got=request.max_new_tokens))
        loaded = (
            self.store.get(request.model, request.dtype) if self.store.is_ready(request.model, request.dtype) else None
        )
        kind_of(request.cache).check(request, loaded)

    def start(
        self,
        request: RunRequest,
        on_token: Callable[[Run], None] | None = None,
        on_done: Callable[[Run], None] | None = None,
        on_error: Callable[[Run, str], None] | None = None,
    ) -> Run | None:
        """Start a run in the background; None (and nothing happens) while another run is in progress.

        Raises the user's errors (CacheOptionError, ValueError) before starting when they can be seen cheaply.
        """
        if self.running:
            return None
        self.check(request)
        run = Run(request)
        self.current = run
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._work, args=(run, on_token, on_done, on_error), daemon=True, name="kvlab-explorer-run"
        )
        self._thread.start()
        return run

    def _work(self, run: Run, on_token, on_done, on_error) -> None:
        request = run.request
        try:
            model, tokenizer = self.store.get(request.model, request.dtype)
            kind_of(request.cache).start(run, model, tokenizer, on_token, self._stop)
        except USER_ERRORS as err:
            run.error = one_line(err)
        except Exception as err:  # any error: the UI shows one line instead of dying silently in a thread
            run.error = f"{type(err).__name__}: {one_line(err)}"
            run.traceback = traceback.format_exc()  # a bug, not a user's mistake: the explorer folds it under the line
        run.done = True
        if run.error is not None:
            if on_error is not None:
                on_error(run, run.error)
        elif on_done is not None:
            on_done(run)

    def stop(self) -> bool:
        """Ask the running generation to end after its current token; False when nothing runs."""
        if not self.running:
            return False
        self._stop.set()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current run ends (for scripts and tests); True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    # -- comparison ---------------------------------------------------------------------------------------------
    def add_to_comparison(self) -> Run:
        """Keep the last finished run overlaid on later plots and as a row of the table."""
        run = self.current
        if run is None or run.result is None:
            raise ValueError(_("there is no finished run to add yet: press Run first"))
        if self.running:
            raise ValueError(_("wait for the run to finish (or Stop it) before adding it to the comparison"))
        if any(r is run for r in self.comparison):
            raise ValueError(_("this run is already in the comparison"))
        self.comparison.append(run)
        return run

    def clear_comparison(self) -> None:
        self.comparison.clear()

    def show_loaded(self, run: Run) -> None:
        """Make a run loaded from a saved trace the current one (drawn, tabled, ready to compare or save)."""
        if self.running:
            raise ValueError(_("wait for the run to finish (or Stop it) before loading a trace"))
        self.current = run

    # -- crop ---------------------------------------------------------------------------------------------------
    def crop(self, n: int) -> dict:
        """`cache.crop(-n)` on the last run's cache, refused (CacheCropError, with the rule) when it cannot be undone.

        The rules are `kvlab.caches.crop_rules`' (n, here, and what each layer allows, in the cache's own `crop`);
        the session adds only what is its own: a run to crop, finished, with a cache object still behind it.
        Returns the crop event (lengths before and after per layer); `run.crop_bytes` says what the crop did to
        the storage (the table's note under "bytes now").
        """
        if self.running:
            raise CacheCropError(_("wait for the run to finish (or Stop it) before cropping its cache"))
        run = self.current
        if run is None or run.result is None:
            raise CacheCropError(_("there is no cache to crop yet: press Run first"))
        tokens_to_remove = removal_count(n)  # crop(-n): the last n tokens
        if run.loaded_from is not None:
            raise CacheCropError(
                _(
                    "this run was loaded from {file}: a saved trace has no cache to crop; run it again, then crop"
                ).format(file=run.loaded_from)
            )
        kind = kind_of(run.request.cache)
        if not kind.crops:
            raise CacheCropError(_(kind.no_crop))
        cache = run.result.cache_object
        if cache is None:
            raise CacheCropError(_("this run used no cache (cache kind 'none'): there is nothing to crop"))
        before = run.bytes_now()
        cache.crop(tokens_to_remove)
        # transformers crops a DynamicLayer by slicing (`keys[..., :-n, :]`): a view that keeps the whole storage
        # until the next forward's torch.cat makes a new tensor. What the views keep beyond their elements:
        tensors = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers]
        kept = max(0, storage_bytes(*tensors) - view_bytes(*tensors))
        run.crop_bytes = {"n": n, "before": before, "after": run.bytes_now(), "kept_by_views": kept}
        return run.result.trace.crops[-1]


def generate_run(run: Run, model, tokenizer, on_token: Callable[[Run], None] | None, stop: threading.Event) -> None:
    """A kind `generate` builds, run for the explorer: `kvlab.run` with a report per token and a Stop switch
    (`kvlab.explorer.generation`), recording into `run.trace` as it goes (the live plots read it)."""
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
        past_recording=request.past_recording,
        trace=run.trace,
        on_token=token,
        stop=stop,
    )
