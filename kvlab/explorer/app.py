"""`explore()`: the Cache Explorer's layout and its callbacks.

Callbacks are plain methods (`on_run`, `on_crop`, ...) that tests call without a browser; a user's mistake shows as
one line, a bug as its line with the traceback folded under it. The generation thread reports back by assigning
widget values only, the one widget update safe from another thread in both JupyterLab and Voila. torch,
transformers and matplotlib (seconds to import) come in a warm-up thread, so the widgets show at once.
"""

from __future__ import annotations

import base64
import html
import re
import threading
import time
import traceback
from pathlib import Path

import ipywidgets as widgets

from kvlab.cache_kinds import quantized_backend
from kvlab.errors import one_line
from kvlab.explorer import export, summary
from kvlab.explorer.controls import WIDE, Controls, fitted, row
from kvlab.explorer.kinds import kind_of, offer_strategies
from kvlab.explorer.models import LOADED, ModelStore
from kvlab.explorer.run_values import USER_ERRORS, Run
from kvlab.explorer.session import Session
from kvlab.i18n import _, number, set_language
from kvlab.measure.timing import clock

# JupyterLab's theme colours (light or dark), with fallbacks for a page without them.
TEXT = "var(--jp-ui-font-color1, #333333)"
MUTED = "var(--jp-ui-font-color2, #555555)"
ERROR = "var(--jp-error-color1, #b30000)"
BORDER = "var(--jp-border-color2, #dddddd)"
EXPORT_DPI = 120  # a saved figure is drawn again, sharper than the 80 dpi live frames
# A 1 x 1 transparent PNG until the warm-up draws the empty picture (an empty Image shows a broken-image icon).
BLANK_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
FIRST_FRAME_POLL_S = 0.02  # how often a new run's drawing thread looks for its first cache update


def _classed(widget: widgets.DOMWidget, css: str) -> widgets.DOMWidget:
    """`widget`, with the CSS class the browser tests and the page's styles find it by."""
    widget.add_class(css)
    return widget


class Explorer:
    """The explorer's state and widgets; display it (it is the last expression of a cell) to see the app."""

    def __init__(
        self,
        model=None,
        tokenizer=None,
        *,
        model_name: str | None = None,
        preload: bool = False,
        min_redraw_s: float = 0.5,
        prompt_presets: dict | None = None,
        save_dir: str | Path | None = None,
    ):
        self.store = ModelStore(model, tokenizer)
        loaded = self.store.has_loaded
        model_name = model_name or (LOADED if loaded else None)
        self.controls = Controls(loaded, model_name, prompt_presets, self.store.has_chat_template)
        self.min_redraw_s = min_redraw_s
        self.last_crop: dict | None = None
        self.save_dir = Path(save_dir) if save_dir is not None else None  # saved files are also written here
        self.exports: list[export.Export] = []  # the files offered for download now
        self._session = Session(self.store)
        self._draw_lock = threading.Lock()
        self._dirty = threading.Event()  # set per new token; the drawing thread redraws at most every min_redraw_s
        self._imported = threading.Event()  # set once the warm-up thread has imported torch, transformers, matplotlib
        self._build_widgets()
        self._initial_status = self.status.value
        threading.Thread(target=self._warm_up, args=(preload,), daemon=True, name="kvlab-explorer-warm-up").start()

    def _warm_up(self, preload: bool) -> None:
        """The imports a run needs, the empty picture (matplotlib's first drawing is its slowest), then, with
        `preload`, the chosen model."""
        try:
            from kvlab.explorer import figures, generation  # noqa: F401 - a run's imports, for the callbacks
        finally:
            self._imported.set()  # a failed import is raised again, with its message, where it is needed
        with self._draw_lock:
            if self._session.current is None:
                self.plot.value = figures.empty_png()
        if not preload or self.store.has_loaded:
            return
        name = self.controls.model.value
        self.store.get(name, self.controls.dtype.value)  # a failure is reported by the Run that loads it again
        loaded = html.escape(_("{model} is loaded: choose a cache and press Run.").format(model=name))
        with self._draw_lock:
            if self.status.value == self._initial_status:  # no run or loaded trace has taken the status line
                self.status.value = loaded

    @property
    def session(self) -> Session:
        """The runs, once the warm-up has imported what they need (only a click in the first seconds waits)."""
        self._imported.wait()
        return self._session

    def _build_widgets(self) -> None:
        def button(text: str, css: str, handler, style: str = "") -> widgets.Button:
            b = widgets.Button(description=text, button_style=style, layout=fitted("148px"))
            b.on_click(lambda _button: self.guarded(handler))
            return _classed(b, css)

        self.run_button = button(_("Run"), "kvlab-run", self.on_run, "primary")
        self.stop_button = button(_("Stop"), "kvlab-stop", self.on_stop, "warning")
        self.compare_button = button(_("Add to comparison"), "kvlab-compare", self.on_add_to_comparison)
        self.clear_button = button(_("Clear comparison"), "kvlab-clear", self.on_clear_comparison)
        crop_n = widgets.BoundedIntText(
            value=1, min=1, max=1_000_000, description=_("crop −n"), style=WIDE, layout=fitted("150px")
        )
        self.crop_n = _classed(crop_n, "kvlab-crop-n")
        self.crop_button = button(_("Crop"), "kvlab-crop", self.on_crop)
        self.save_trace_button = button(_("Save trace (JSON)"), "kvlab-save-trace", self.on_save_trace)
        self.save_figure_button = button(_("Save figure (PNG)"), "kvlab-save-figure", self.on_save_figure)
        self.save_table_button = button(_("Save table (CSV)"), "kvlab-save-table", self.on_save_table)
        upload = widgets.FileUpload(
            accept=".json,application/json", description=_("Load trace"), layout=fitted("148px")
        )
        self.load_button = _classed(upload, "kvlab-load-trace")
        self.load_button.observe(lambda change: self.guarded(self._on_upload, change["new"]), names="value")
        files = (self.save_trace_button, self.save_figure_button, self.save_table_button, self.load_button)
        self._idle_buttons = (self.run_button, self.compare_button, self.clear_button, self.crop_button, *files)
        self._set_running(False)
        self.progress = _classed(widgets.IntProgress(value=0, min=0, max=1, description=_("tokens")), "kvlab-progress")
        ready = html.escape(_("Choose a model and a cache, then press Run."))
        self.status, self.message, self.text, self.downloads = (
            _classed(widgets.HTML(value), f"kvlab-{css}")
            for value, css in ((ready, "status"), ("", "message"), ("", "text"), ("", "downloads"))
        )
        self.plot = _classed(widgets.Image(value=BLANK_PNG, format="png", layout={"max_width": "100%"}), "kvlab-plot")
        self.table = _classed(widgets.HTML(summary.to_html([]), layout={"width": "100%"}), "kvlab-summary")  # scrolls
        title = html.escape(_("kvlab Cache Explorer"))
        subtitle = html.escape(_("pick a model and a cache, press Run, watch the cache."))
        buttons = (self.run_button, self.stop_button, self.compare_button, self.clear_button, self.crop_n)
        top = (widgets.HTML(f"<b>{title}</b>: {subtitle}"), self.controls.layout(), row(*buttons, self.crop_button))
        shown = (widgets.HBox([self.progress, self.status]), self.message, self.text, self.plot, self.table)
        self.widget = _classed(widgets.VBox([*top, *shown, row(*files), self.downloads]), "kvlab-explorer")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def show_message(self, text: str, error: bool = False, details: str | None = None) -> None:
        """One line of text (red for an error); `details` (a traceback) folds under it in a <details>."""
        level, color = ("error", ERROR) if error else ("info", TEXT)
        folded = ""
        if details:
            folded = (
                f'<details class="kvlab-traceback"><summary style="cursor:pointer;color:{MUTED}">'
                + html.escape(_("traceback (a bug in kvlab or its libraries: please report it with this text)"))
                + "</summary>"
                f'<pre style="white-space:pre-wrap;font-size:11px;margin:2px 0;padding:4px;color:{TEXT};'
                f'border:1px solid {BORDER};max-height:24em;overflow:auto">{html.escape(details)}</pre>'
                "</details>"
            )
        style = f"color:{color};white-space:pre-wrap"
        self.message.value = f'<div class="kvlab-{level}" style="{style}">{html.escape(text)}</div>{folded}'

    def show_error(self, err: BaseException) -> None:
        if isinstance(err, USER_ERRORS):
            self.show_message(one_line(str(err)), error=True)
            return
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        self.show_message(one_line(f"{type(err).__name__}: {err}"), error=True, details=text)

    def guarded(self, handler, *args):
        """Call a widget callback; whatever it raises is shown (ipywidgets would only log it)."""
        try:
            return handler(*args)
        except Exception as err:  # any error: shown to the user, with its traceback when it is a bug
            self.show_error(err)
            return None

    @property
    def message_text(self) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", self.message.value))

    def _set_running(self, running: bool) -> None:
        """While a run goes, Stop is the one button that works."""
        self.stop_button.disabled = not running
        for b in self._idle_buttons:
            b.disabled = running

    def on_run(self) -> Run | None:
        """Start a run from the controls; a message instead when one is going or the options are invalid."""
        if not self._imported.is_set():  # torch is still being imported
            self.status.value = html.escape(_loading(self.controls.model.value))
        if self.session.running:
            self.show_message(_("A run is already in progress: this Run was ignored (press Stop to end it)."))
            return None
        request, bar = self.controls.request(), self.progress
        shown = (self.message.value, self.text.value, bar.max, bar.value, bar.bar_style, self.last_crop)
        self._show_running(request)
        try:
            run = self.session.start(request, on_token=self._on_token, on_done=self._on_done, on_error=self._on_error)
        except BaseException as err:
            self._set_running(False)
            if not isinstance(err, USER_ERRORS):
                raise
            self.message.value, self.text.value, bar.max, bar.value, bar.bar_style, self.last_crop = shown
            self.show_message(str(err), error=True)
            self.status.value = html.escape(_("not started: see the message below"))
            return None
        threading.Thread(target=self._draw_live, args=(run,), daemon=True, name="kvlab-explorer-draw").start()
        return run

    def _show_running(self, request) -> None:
        """Shown before the run's thread starts: a run that fails at once reports from its thread after this."""
        loading = not self.store.is_ready(request.model, request.dtype)
        self.show_message("")
        self.last_crop = None
        total, working = kind_of(request.cache).progress(request)  # tokens, or requests for a kind that ends whole
        self.progress.value, self.progress.max, self.progress.bar_style = 0, total, ""
        self.text.value = ""
        status = _loading(request.model) if loading else working
        if self._quanto_build_pending(request):  # kvlab.run builds it before its clock starts: say why it waits
            notice = _("building optimum-quanto's C++ extension once (about 1 minute)…")
            status = f"{status} {notice}" if loading else notice
        with self._draw_lock:  # the warm-up thread's "is loaded" line must not replace this one
            self.status.value = html.escape(status)
        self._set_running(True)
        self._dirty.clear()

    def _quanto_build_pending(self, request) -> bool:
        backend = quantized_backend(request.cache, request.options)
        if backend is None or not backend.builds_extension:
            return False
        from kvlab.caches.quantized import quanto_extension_pending

        ready = self.store.is_ready(request.model, request.dtype)
        return quanto_extension_pending(self.store.get(request.model, request.dtype)[0].device if ready else "cpu")

    def on_stop(self) -> None:
        if self.session.running and not (kind := kind_of(self.session.current.request.cache)).streams:
            self.show_message(_(kind.no_stop))
            return
        if self.session.stop():
            self.status.value = html.escape(_("stopping after the current token…"))
        else:
            self.show_message(_("Nothing is running."))

    def on_add_to_comparison(self) -> None:
        try:
            run = self.session.add_to_comparison()
        except ValueError as err:
            self.show_message(str(err), error=True)
            return
        added = _(
            "Added [{number}] {label} to the comparison; it stays drawn dashed on the plots and as a row of the table."
        )
        self.show_message(added.format(number=len(self.session.comparison), label=run.label))
        self.refresh()

    def on_clear_comparison(self) -> None:
        self.session.clear_comparison()
        self.show_message(_("Comparison cleared."))
        self.refresh()

    def on_crop(self) -> dict | None:
        n = self.crop_n.value
        try:
            event = self.session.crop(n)
        except USER_ERRORS as err:
            self.show_message(str(err), error=True)
            return None
        self.last_crop = event
        lengths = ", ".join(f"{b} → {a}" for b, a in sorted(set(zip(event["lengths_before"], event["lengths_after"]))))
        cropped = _("cache.crop(-{n}): layer lengths {lengths}. Cropped positions are red on the map.")
        self.show_message(cropped.format(n=n, lengths=lengths))
        self.refresh()
        return event

    def _on_token(self, run: Run) -> None:
        """Cheap updates only: `_draw_live` draws, so the model never waits for matplotlib."""
        tokens, generating = len(run.new_ids), _("generating: {tokens}/{max_new_tokens} tokens")
        self.progress.value = min(tokens, self.progress.max)
        self.status.value = generating.format(tokens=tokens, max_new_tokens=run.request.max_new_tokens)
        self._dirty.set()

    def _draw_live(self, run: Run) -> None:
        """Redraw while `run` generates: once its first cache update is recorded (during the prefill), then after new
        tokens, at most every `min_redraw_s`."""
        if not kind_of(run.request.cache).streams:
            return
        drawn = None  # when the last picture was drawn
        while not run.done:
            if drawn is None:
                if not run.trace.events:
                    time.sleep(FIRST_FRAME_POLL_S)
                    continue
            elif not self._dirty.wait(0.1):
                continue
            else:
                time.sleep(max(0.0, self.min_redraw_s - (clock() - drawn)))
            self._dirty.clear()
            try:
                self.refresh(run, table=False, live=True)
            except Exception as err:  # any error: a drawing bug is shown, and the run goes on undrawn
                self.show_error(err)
                return
            drawn = clock()

    def _on_done(self, run: Run) -> None:
        try:
            self._show_text(run)
            progress, style, status, note = kind_of(run.request.cache).finished(run)
            self.progress.value, self.progress.bar_style = progress, style
            self.status.value = status
            if note is not None:
                self.show_message(note)
            self.refresh(run)
        except Exception as err:  # any error: shown, or it would vanish with the generating thread
            self.show_error(err)
        finally:
            self._set_running(False)

    def _on_error(self, run: Run, message: str) -> None:
        try:
            self.show_message(message, error=True, details=run.traceback)
            self.status.value = html.escape(_("failed"))
            self.progress.bar_style = "danger"
            if run.trace.events:
                self.refresh(run)
        finally:
            self._set_running(False)

    def _show_text(self, run: Run) -> None:
        if run.loaded_from is not None:  # no tokenizer behind a saved trace: the text it carries, if any
            text, title = run.result.text, _("generated text (not saved in {file})")
            if "text" in run.trace.meta:
                title = _("generated text (saved in {file})")
            title = title.format(file=run.loaded_from)
        else:
            tokenizer = self.store.get(run.request.model, run.request.dtype)[1]
            text, title = kind_of(run.request.cache).text(run, tokenizer)
        self.text.value = (
            f'<div style="font-size:12px;color:{MUTED}">{html.escape(title)}</div><pre style="'
            f"white-space:pre-wrap;margin:0;padding:4px;border:1px solid {BORDER};max-height:8em;"
            f'overflow:auto">{html.escape(text)}</pre>'
        )

    def refresh(self, run: Run | None = None, table: bool = True, live: bool = False) -> None:
        run = run or self.session.current
        with self._draw_lock:
            if live and run.done:
                return  # the final picture is drawn by `_on_done`; a late live frame must not replace it
            if live:
                self._show_text(run)
            self.plot.value = self._png(run)
            if table:
                self.table.value = summary.to_html(self.summary_rows())

    def _figure(self, run: Run | None):
        from kvlab.explorer import figures  # matplotlib: imported by the warm-up, which `session` waited for

        return figures.picture(run, self.session.comparison, self.last_crop)

    def _png(self, run: Run | None, **save) -> bytes:
        from kvlab.plots._figure import png_bytes  # matplotlib, as `_figure`

        return png_bytes(self._figure(run), **save)

    def _finished_run(self) -> Run:
        run = self.session.current
        if run is None or run.result is None:
            raise ValueError(_("there is nothing to save yet: press Run (or load a trace) first"))
        if self.session.running:
            raise ValueError(_("wait for the run to finish (or Stop it) before saving"))
        return run

    def _offer(self, item: export.Export) -> export.Export:
        """Offer `item` as a download link (replacing one of the same name); write it to save_dir."""
        where = ""
        if self.save_dir is not None:
            try:
                where = _(" and written to {path}").format(path=item.write(self.save_dir))
            except OSError as err:  # the user's directory, not a bug: one line, and the download still works
                reason = err.strerror or type(err).__name__
                where = _("; it could not be written to {folder} ({reason})").format(
                    folder=self.save_dir, reason=reason
                )
        self.exports = [e for e in self.exports if e.name != item.name] + [item]
        self.downloads.value = export.links_html(self.exports)
        ready = _("{file} ({size}) is ready: click its link below to download it{where}.")
        self.show_message(ready.format(file=item.name, size=export.size_text(len(item.data)), where=where))
        return item

    def on_save_trace(self) -> export.Export:
        run = self._finished_run()
        return self._offer(export.for_run(run, "trace", "json", export.trace_json(run)))

    def on_save_figure(self) -> export.Export:
        run = self._finished_run()
        with self._draw_lock:
            png = self._png(run, dpi=EXPORT_DPI)
        return self._offer(export.for_run(run, "figure", "png", png))

    def on_save_table(self) -> export.Export:
        run = self._finished_run()
        return self._offer(export.for_run(run, "table", "csv", export.table_csv(self.summary_rows())))

    def _on_upload(self, value) -> None:
        if not value:
            return  # the widget was cleared
        try:
            for file in value:  # a tuple of dicts, the content a memoryview
                self.on_load_trace(file["name"], bytes(file["content"]))
        finally:
            self.load_button.value = ()  # the same file can be loaded again

    def on_load_trace(self, name: str, content: bytes) -> Run | None:
        """Show a saved trace as the current run, or refuse a file that is not one in one line."""
        session = self.session  # first: a loaded run's result is a `RunResult`, whose module imports torch
        try:
            trace = export.read_trace(name, content)
            session.show_loaded(run := export.loaded_run(trace, name))
        except ValueError as err:  # TraceFormatError is one
            self.show_message(one_line(str(err)), error=True)
            return None
        self.last_crop = None
        s = trace.summary()
        self.progress.value, self.progress.max, self.progress.bar_style = 0, 1, ""
        self._show_text(run)
        self.refresh(run)
        self.show_message(
            _(
                "Loaded {file}: {label}, {steps} steps, peak {bytes} B. Add it to the comparison, then Run, to "
                "compare a new run with it."
            ).format(file=name, label=run.request.label(), steps=s["steps"], bytes=number(s["peak_bytes"]))
        )
        self.status.value = _("loaded {file}: {steps} steps").format(file=name, steps=s["steps"])
        return run

    def summary_rows(self) -> list[dict]:
        return summary.rows_for(self.session)

    def run_and_wait(self, timeout: float | None = 300, **controls) -> Run | None:
        """Set controls, press Run and wait for the end: the explorer, scripted."""
        self.controls.set(**controls)
        run = self.on_run()
        if run is not None:
            self.session.wait(timeout)
        return run


def _loading(model: str) -> str:
    return _("loading {model} (first use takes a few seconds)…").format(model=model)


def explore(model=None, tokenizer=None, lang: str | None = None, strategies=(), **kwargs) -> Explorer:
    """The Cache Explorer, for an already-loaded `model` (and `tokenizer`) or one chosen in the app. `preload=True`
    loads the default model in the background; `save_dir="."` also writes saved files there; `lang="pt-BR"` shows
    it in Portuguese (as `kvlab.set_language` does); `strategies=[MyLayer]` adds your layer classes (or
    "FILE.py:ClassName") to the cache menu, under their class names."""
    if lang is not None:
        set_language(lang)
    offer_strategies(strategies)
    return Explorer(model, tokenizer, **kwargs)
