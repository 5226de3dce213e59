"""`explore()`: the Cache Explorer's layout and its callbacks.

Every callback is a plain method (`on_run`, `on_stop`, `on_add_to_comparison`, `on_crop`, ...) that tests call
without a browser. Callbacks run on the kernel's main thread and return at once; the generation thread reports
back through `_on_token` / `_on_done` / `_on_error`, which only assign widget values (an `Image`'s PNG bytes,
an `HTML`'s text), the one kind of widget update that is safe from another thread in both JupyterLab and Voila.
"""

from __future__ import annotations

import html
import re
import threading
import time

import ipywidgets as widgets

from kvlab.explorer import figures, summary
from kvlab.explorer.controls import Controls
from kvlab.explorer.models import LOADED, ModelStore
from kvlab.explorer.session import USER_ERRORS, Run, Session


class Explorer:
    """The explorer's state and widgets; display it (it is the last expression of a cell) to see the app."""

    def __init__(self, model=None, tokenizer=None, *, model_name: str | None = None, preload: bool = False,
                 min_redraw_s: float = 0.5, prompt_presets: dict | None = None):  # fmt: skip
        self.store = ModelStore(model, tokenizer)
        self.session = Session(self.store)
        self.controls = Controls(self.store.has_loaded, model_name or (LOADED if self.store.has_loaded else None),
                                 prompt_presets)  # fmt: skip
        self.min_redraw_s = min_redraw_s
        self.last_crop: dict | None = None
        self._draw_lock = threading.Lock()
        self._dirty = threading.Event()  # set per new token; the drawing thread redraws at most every min_redraw_s
        self._build_widgets()
        if preload and not self.store.has_loaded:
            self.store.warm_up(self.controls.model.value, self.controls.dtype.value)

    def _build_widgets(self) -> None:
        def button(text: str, css: str, handler, style: str = "", disabled: bool = False) -> widgets.Button:
            b = widgets.Button(description=text, button_style=style, disabled=disabled)
            b.add_class(css)
            b.on_click(lambda _: handler())
            return b

        self.run_button = button("Run", "kvlab-run", self.on_run, "primary")
        self.stop_button = button("Stop", "kvlab-stop", self.on_stop, "warning", disabled=True)
        self.compare_button = button("Add to comparison", "kvlab-compare", self.on_add_to_comparison)
        self.clear_button = button("Clear comparison", "kvlab-clear", self.on_clear_comparison)
        self.crop_n = widgets.BoundedIntText(value=1, min=1, max=1_000_000, description="crop −n",
                                             layout=widgets.Layout(width="150px"))  # fmt: skip
        self.crop_n.add_class("kvlab-crop-n")
        self.crop_button = button("Crop", "kvlab-crop", self.on_crop)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="tokens")
        self.progress.add_class("kvlab-progress")
        self.status = widgets.HTML("Choose a model and a cache, then press Run.")
        self.status.add_class("kvlab-status")
        self.message = widgets.HTML("")
        self.message.add_class("kvlab-message")
        self.text = widgets.HTML("")
        self.text.add_class("kvlab-text")
        self.plot = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.plot.add_class("kvlab-plot")
        self.table = widgets.HTML(summary.to_html([]))
        self.table.add_class("kvlab-summary")
        self.widget = widgets.VBox([
            widgets.HTML("<b>kvlab Cache Explorer</b>: pick a model and a cache, press Run, watch the cache."),
            self.controls.layout(),
            widgets.HBox([self.run_button, self.stop_button, self.compare_button, self.clear_button,
                          self.crop_n, self.crop_button], layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox([self.progress, self.status]),
            self.message, self.text, self.plot, self.table,
        ])  # fmt: skip
        self.widget.add_class("kvlab-explorer")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # -- messages -----------------------------------------------------------------------------------------------
    def show_message(self, text: str, error: bool = False) -> None:
        color = "#b30000" if error else "#333333"
        kind = "error" if error else "info"
        style = f"color:{color};white-space:pre-wrap"
        self.message.value = f'<div class="kvlab-{kind}" style="{style}">{html.escape(text)}</div>'

    @property
    def message_text(self) -> str:
        """The message shown now, as plain text."""
        return html.unescape(re.sub(r"<[^>]+>", "", self.message.value))

    def _set_running(self, running: bool) -> None:
        self.run_button.disabled = running
        self.stop_button.disabled = not running
        for b in (self.compare_button, self.clear_button, self.crop_button):
            b.disabled = running

    # -- callbacks (main thread) --------------------------------------------------------------------------------
    def on_run(self) -> Run | None:
        """Start a run from the controls; a message instead of a run when one is going or the options are invalid."""
        if self.session.running:
            self.show_message("A run is already in progress: this Run was ignored (press Stop to end it).")
            return None
        request = self.controls.request()
        loading = not self.store.is_ready(request.model, request.dtype)
        try:
            run = self.session.start(request, on_token=self._on_token, on_done=self._on_done, on_error=self._on_error)
        except USER_ERRORS as err:
            self.show_message(str(err), error=True)
            self.status.value = "not started: see the message below"
            return None
        self.show_message("")
        self.last_crop = None
        self._dirty.clear()
        threading.Thread(target=self._draw_live, args=(run,), daemon=True, name="kvlab-explorer-draw").start()
        self.progress.value, self.progress.max = 0, request.max_new_tokens
        self.progress.bar_style = ""
        self.text.value = ""
        self.status.value = f"loading {request.model} (first use takes a few seconds)…" if loading else "prefill…"
        self._set_running(True)
        return run

    def on_stop(self) -> None:
        if self.session.stop():
            self.status.value = "stopping after the current token…"
        else:
            self.show_message("Nothing is running.")

    def on_add_to_comparison(self) -> None:
        try:
            run = self.session.add_to_comparison()
        except ValueError as err:
            self.show_message(str(err), error=True)
            return
        self.show_message(f"Added [{len(self.session.comparison)}] {run.label} to the comparison; it stays drawn "
                          "dashed on the plots and as a row of the table.")  # fmt: skip
        self.refresh()

    def on_clear_comparison(self) -> None:
        self.session.clear_comparison()
        self.show_message("Comparison cleared.")
        self.refresh()

    def on_crop(self) -> dict | None:
        """crop(-n) on the last run's cache; the refusal, with its rule, shown as a message."""
        n = self.crop_n.value
        try:
            event = self.session.crop(n)
        except USER_ERRORS as err:
            self.show_message(str(err), error=True)
            return None
        self.last_crop = event
        lengths = sorted(set(zip(event["lengths_before"], event["lengths_after"])))
        shown = ", ".join(f"{b} → {a}" for b, a in lengths)
        self.show_message(f"cache.crop(-{n}): layer lengths {shown}. Cropped positions are red on the map.")
        self.refresh()
        return event

    # -- reports from the generation thread ---------------------------------------------------------------------
    def _on_token(self, run: Run) -> None:
        """Cheap updates only: drawing happens in `_draw_live`, so the model never waits for matplotlib."""
        tokens = len(run.new_ids)
        self.progress.value = min(tokens, self.progress.max)
        self.status.value = f"generating: {tokens}/{run.request.max_new_tokens} tokens"
        self._dirty.set()

    def _draw_live(self, run: Run) -> None:
        """Redraw while `run` generates: at once after the prefill, then at most every `min_redraw_s`."""
        drawn = 0.0
        while not run.done:
            if not self._dirty.wait(0.1):
                continue
            time.sleep(max(0.0, self.min_redraw_s - (time.perf_counter() - drawn)))
            self._dirty.clear()
            self.refresh(run, table=False, live=True)
            drawn = time.perf_counter()

    def _on_done(self, run: Run) -> None:
        result = run.result
        stopped = result.trace.meta.get("stopped")
        self._show_text(run)
        self.progress.value = len(result.generated_token_ids)
        self.progress.bar_style = "warning" if stopped else "success"
        what = "stopped after" if stopped else "done:"
        self.status.value = (f"{what} {len(result.generated_token_ids)} tokens ({run.prompt_tokens}-token prompt) "
                             f"in {result.seconds:.2f} s")  # fmt: skip
        if stopped:
            self.show_message("Stopped: the partial trace is kept (plots and table show the steps that ran).")
        self.refresh(run)
        self._set_running(False)

    def _on_error(self, run: Run, message: str) -> None:
        self.show_message(message, error=True)
        self.status.value = "failed"
        self.progress.bar_style = "danger"
        if run.trace.events:
            self.refresh(run)
        self._set_running(False)

    # -- drawing ------------------------------------------------------------------------------------------------
    def _show_text(self, run: Run) -> None:
        tokenizer = self.store.get(run.request.model, run.request.dtype)[1]
        text = tokenizer.decode(run.new_ids, skip_special_tokens=True)
        self.text.value = (f'<div style="font-size:12px;color:#555">generated text</div><pre style="white-space:'
                           f'pre-wrap;margin:0;padding:4px;border:1px solid #ddd;max-height:8em;overflow:auto">'
                           f"{html.escape(text)}</pre>")  # fmt: skip

    def refresh(self, run: Run | None = None, table: bool = True, live: bool = False) -> None:
        """Redraw the plots (and the table) from the current run, the comparison and the last crop."""
        run = run or self.session.current
        with self._draw_lock:
            if live and run.done:
                return  # the final picture is drawn by `_on_done`; a late live frame must not replace it
            if live:
                self._show_text(run)
            current = (run.label, run.snapshot()) if run is not None else None
            rows = run.layer_rows() if run is not None else []
            comparison = [(r.label, r.result.trace) for r in self.session.comparison if r is not run]
            status = f"{run.label}: {current[1].summary()['steps']} steps" if run is not None else ""
            fig = figures.dashboard(current, rows, comparison, crop=self.last_crop, status=status)
            self.plot.value = figures.png_bytes(fig)
            if table:
                self.table.value = summary.to_html(summary.rows_for(self.session))

    # -- scripting ----------------------------------------------------------------------------------------------
    def summary_rows(self) -> list[dict]:
        return summary.rows_for(self.session)

    def run_and_wait(self, timeout: float | None = 300, **controls) -> Run | None:
        """Set controls, press Run and wait for the end: the explorer, scripted (for notebooks and tests)."""
        self.controls.set(**controls)
        run = self.on_run()
        if run is not None:
            self.session.wait(timeout)
        return run


def explore(model=None, tokenizer=None, **kwargs) -> Explorer:
    """The Cache Explorer. Pass an already-loaded `model` (and its `tokenizer`) to explore it; otherwise choose a
    bundled model (SmolLM2, Gemma 3) or a tiny random one in the app. `preload=True` loads the default model in
    the background so the first Run starts at once."""
    return Explorer(model, tokenizer, **kwargs)
