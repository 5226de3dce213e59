"""`Session`: one run at a time in a background thread, its live partial trace, the comparison list, and crops.

Widget callbacks must return at once, so `start` only checks the request and launches a daemon thread, which ends
by calling `on_done` or `on_error` whatever happened; the trace recorded so far is kept. Torch-free.
"""

from __future__ import annotations

import threading
import traceback

from kvlab.caches.crop_rules import CacheCropError, removal_count
from kvlab.errors import one_line
from kvlab.explorer.kinds import kind_of
from kvlab.explorer.models import ModelStore
from kvlab.explorer.run_values import USER_ERRORS, Run, RunRequest
from kvlab.i18n import _


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

    def check(self, request: RunRequest) -> None:
        """Every check that needs no model work: with the model already loaded, all of its kind's checks."""
        if request.max_new_tokens < 1:
            raise ValueError(_("max new tokens must be at least 1; got {got}").format(got=request.max_new_tokens))
        loaded = (
            self.store.get(request.model, request.dtype) if self.store.is_ready(request.model, request.dtype) else None
        )
        kind_of(request.cache).check(request, loaded)

    def start(self, request: RunRequest, on_token=None, on_done=None, on_error=None) -> Run | None:
        """Start a run in the background (None while another is in progress), after `check`; the thread calls
        `on_token(run)`, then `on_done(run)` or `on_error(run, message)`."""
        if self.running:
            return None
        self.check(request)
        self.current = run = Run(request)
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
        """End the running generation after its current token; False when nothing runs."""
        if not self.running:
            return False
        self._stop.set()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current run ends; True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def add_to_comparison(self) -> Run:
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
        if self.running:
            raise ValueError(_("wait for the run to finish (or Stop it) before loading a trace"))
        self.current = run

    def crop(self, n: int) -> dict:
        """`cache.crop(-n)` on the last run's cache (the rules are `kvlab.caches.crop_rules`'), refused with
        CacheCropError; returns the crop event and sets `run.crop_bytes`."""
        if self.running:
            raise CacheCropError(_("wait for the run to finish (or Stop it) before cropping its cache"))
        run = self.current
        if run is None or run.result is None:
            raise CacheCropError(_("there is no cache to crop yet: press Run first"))
        tokens_to_remove = removal_count(n)
        if run.loaded_from is not None:
            loaded = _("this run was loaded from {file}: a saved trace has no cache to crop; run it again, then crop")
            raise CacheCropError(loaded.format(file=run.loaded_from))
        kind = kind_of(run.request.cache)
        if not kind.crops:
            raise CacheCropError(_(kind.no_crop))
        cache = run.result.cache_object
        if cache is None:
            raise CacheCropError(_("this run used no cache (cache kind 'none'): there is nothing to crop"))
        before = run.bytes_now()
        cache.crop(tokens_to_remove)
        from kvlab.recording.storage import storage_bytes, view_bytes  # torch: imported by the run that made the cache

        # transformers crops a DynamicLayer by slicing: a view that keeps the whole storage until the next torch.cat
        tensors = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers]
        kept = max(0, storage_bytes(*tensors) - view_bytes(*tensors))
        run.crop_bytes = {"n": n, "before": before, "after": run.bytes_now(), "kept_by_views": kept}
        return run.result.trace.crops[-1]
