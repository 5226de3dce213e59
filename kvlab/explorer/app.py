"""`explore()`: the Cache Explorer's layout and its callbacks.

Every callback is a plain method (`on_run`, `on_stop`, `on_add_to_comparison`, `on_crop`, `on_save_trace`,
`on_load_trace`, ...) that tests call without a browser. A user's mistake shows as one line; anything else a
callback raises (a bug) shows its message with the traceback folded under it, never silently lost.
Callbacks run on the kernel's main thread and return at once; the generation thread reports back through
`_on_token` / `_on_done` / `_on_error`, which only assign widget values (an `Image`'s PNG bytes, an `HTML`'s
text), the one kind of widget update that is safe from another thread in both JupyterLab and Voila.

The widgets are built from light modules only, so the page shows them in a second or two: torch, transformers
and matplotlib (seconds to import) come in the warm-up thread, which then draws the empty picture and loads the
chosen model while the learner reads. A callback that needs them waits for that import (only a click in the
first seconds ever waits).
"""

from __future__ import annotations

import base64
import html
import re
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import ipywidgets as widgets

from kvlab.explorer import summary
from kvlab.explorer.controls import Controls, fitted
from kvlab.explorer.kinds import for_trace, kind_of
from kvlab.explorer.models import LOADED, ModelStore
from kvlab.i18n import _, number
from kvlab.measure.timing import clock

if TYPE_CHECKING:
    from kvlab.explorer import export
    from kvlab.explorer.session import Run, Session

# JupyterLab's theme colours (light or dark), with fallbacks for a page without them.
TEXT = "var(--jp-ui-font-color1, #333333)"
MUTED = "var(--jp-ui-font-color2, #555555)"
ERROR = "var(--jp-error-color1, #b30000)"
BORDER = "var(--jp-border-color2, #dddddd)"
EXPORT_DPI = 120  # a saved figure is drawn again, sharper than the 80 dpi live frames
# What the plot shows until the warm-up draws the empty picture: a 1 x 1 transparent PNG (an Image with no bytes
# shows the browser's broken-image icon).
BLANK_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
FIRST_FRAME_POLL_S = 0.02  # how often a new run's drawing thread looks for its first cache update


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
        self.controls = Controls(
            self.store.has_loaded,
            model_name or (LOADED if self.store.has_loaded else None),
            prompt_presets,
            self.store.has_chat_template,
        )
        self.min_redraw_s = min_redraw_s
        self.last_crop: dict | None = None
        self.save_dir = Path(save_dir) if save_dir is not None else None  # saved files are also written here
        self.exports: list[export.Export] = []  # the files offered for download now
        self._draw_lock = threading.Lock()
        self._dirty = threading.Event()  # set per new token; the drawing thread redraws at most every min_redraw_s
        self._session: Session | None = None  # made by the warm-up thread, with the imports it needs
        self._imported = threading.Event()  # set once the warm-up thread has imported torch, transformers, matplotlib
        self._build_widgets()
        self._initial_status = self.status.value
        threading.Thread(target=self._warm_up, args=(preload,), daemon=True, name="kvlab-explorer-warm-up").start()

    def _warm_up(self, preload: bool) -> None:
        """The slow part of the start, after the widgets are on the page: the imports a run and a picture need, the
        empty picture (matplotlib's first drawing is its slowest), then, with `preload`, the chosen model."""
        try:
            from kvlab.explorer import export, figures  # noqa: F401 - imported for the callbacks, which wait for it
            from kvlab.explorer.session import Session

            self._session = Session(self.store)
        finally:
            self._imported.set()  # a failed import is raised again, with its message, by the callback that waits
        with self._draw_lock:
            if self._session.current is None:
                self.plot.value = figures.empty_png()
        if not preload or self.store.has_loaded:
            return
        name, dtype = self.controls.model.value, self.controls.dtype.value
        self.store.get(name, dtype)  # a failure is reported by the Run that loads it again
        with self._draw_lock:
            if self.status.value == self._initial_status:  # no run or loaded trace has taken the status line
                self.status.value = html.escape(
                    _("{model} is loaded: choose a cache and press Run.").format(model=name)
                )

    def _ready(self) -> None:
        """Wait for the warm-up's imports (seconds after the page appears; no wait later)."""
        self._imported.wait()
        if self._session is None:  # the warm-up's import failed: importing again raises its error here, shown
            from kvlab.explorer.session import Session

            self._session = Session(self.store)

    @property
    def session(self) -> Session:
        """The runs, the comparison and crops (`session.Session`), once the warm-up has imported it."""
        self._ready()
        return self._session

    def _build_widgets(self) -> None:
        def button(text: str, css: str, handler, style: str = "", disabled: bool = False) -> widgets.Button:
            b = widgets.Button(description=text, button_style=style, disabled=disabled, layout=fitted("148px"))
            b.add_class(css)
            b.on_click(lambda _button: self.guarded(handler))
            return b

        self.run_button = button(_("Run"), "kvlab-run", self.on_run, "primary")
        self.stop_button = button(_("Stop"), "kvlab-stop", self.on_stop, "warning", disabled=True)
        self.compare_button = button(_("Add to comparison"), "kvlab-compare", self.on_add_to_comparison)
        self.clear_button = button(_("Clear comparison"), "kvlab-clear", self.on_clear_comparison)
        self.crop_n = widgets.BoundedIntText(
            value=1,
            min=1,
            max=1_000_000,
            description=_("crop −n"),
            style={"description_width": "initial"},
            layout=fitted("150px"),
        )
        self.crop_n.add_class("kvlab-crop-n")
        self.crop_button = button(_("Crop"), "kvlab-crop", self.on_crop)
        self.save_trace_button = button(_("Save trace (JSON)"), "kvlab-save-trace", self.on_save_trace)
        self.save_figure_button = button(_("Save figure (PNG)"), "kvlab-save-figure", self.on_save_figure)
        self.save_table_button = button(_("Save table (CSV)"), "kvlab-save-table", self.on_save_table)
        self.load_button = widgets.FileUpload(
            accept=".json,application/json", multiple=False, description=_("Load trace"), layout=fitted("148px")
        )
        self.load_button.add_class("kvlab-load-trace")
        self.load_button.observe(lambda change: self.guarded(self._on_upload, change["new"]), names="value")
        self.downloads = widgets.HTML("")
        self.downloads.add_class("kvlab-downloads")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description=_("tokens"))
        self.progress.add_class("kvlab-progress")
        self.status = widgets.HTML(html.escape(_("Choose a model and a cache, then press Run.")))
        self.status.add_class("kvlab-status")
        self.message = widgets.HTML("")
        self.message.add_class("kvlab-message")
        self.text = widgets.HTML("")
        self.text.add_class("kvlab-text")
        self.plot = widgets.Image(value=BLANK_PNG, format="png", layout=widgets.Layout(max_width="100%"))
        self.plot.add_class("kvlab-plot")
        self.table = widgets.HTML(summary.to_html([]), layout=widgets.Layout(width="100%"))  # its box scrolls
        self.table.add_class("kvlab-summary")
        self.widget = widgets.VBox(
            [
                widgets.HTML(
                    "<b>"
                    + html.escape(_("kvlab Cache Explorer"))
                    + "</b>: "
                    + html.escape(_("pick a model and a cache, press Run, watch the cache."))
                ),
                self.controls.layout(),
                widgets.HBox(
                    [
                        self.run_button,
                        self.stop_button,
                        self.compare_button,
                        self.clear_button,
                        self.crop_n,
                        self.crop_button,
                    ],
                    layout=widgets.Layout(flex_flow="row wrap"),
                ),
                widgets.HBox([self.progress, self.status]),
                self.message,
                self.text,
                self.plot,
                self.table,
                widgets.HBox(
                    [self.save_trace_button, self.save_figure_button, self.save_table_button, self.load_button],
                    layout=widgets.Layout(flex_flow="row wrap"),
                ),
                self.downloads,
            ]
        )
        self.widget.add_class("kvlab-explorer")

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # -- messages -----------------------------------------------------------------------------------------------
    def show_message(self, text: str, error: bool = False, details: str | None = None) -> None:
        """One line of text (red for an error); `details` (a traceback) folds under it in a <details>."""
        color = ERROR if error else TEXT
        level = "error" if error else "info"
        style = f"color:{color};white-space:pre-wrap"
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
        self.message.value = f'<div class="kvlab-{level}" style="{style}">{html.escape(text)}</div>{folded}'

    def show_error(self, err: BaseException) -> None:
        """A user's mistake as one line; any other exception (a bug) as its line plus a collapsible traceback."""
        self._ready()
        from kvlab.explorer.session import USER_ERRORS, one_line
        from kvlab.recording.trace import TraceFormatError

        if isinstance(err, (*USER_ERRORS, TraceFormatError)):
            self.show_message(one_line(str(err)), error=True)
            return
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        self.show_message(one_line(f"{type(err).__name__}: {err}"), error=True, details=text)

    def guarded(self, handler, *args):
        """Call a widget callback; whatever it raises is shown in the app (ipywidgets would only log it)."""
        try:
            return handler(*args)
        except Exception as err:  # any error: shown to the user, with its traceback when it is a bug
            self.show_error(err)
            return None

    @property
    def message_text(self) -> str:
        """The message shown now, as plain text."""
        return html.unescape(re.sub(r"<[^>]+>", "", self.message.value))

    def _set_running(self, running: bool) -> None:
        self.run_button.disabled = running
        self.stop_button.disabled = not running
        for b in (
            self.compare_button,
            self.clear_button,
            self.crop_button,
            self.save_trace_button,
            self.save_figure_button,
            self.save_table_button,
            self.load_button,
        ):
            b.disabled = running

    # -- callbacks (main thread) --------------------------------------------------------------------------------
    def on_run(self) -> Run | None:
        """Start a run from the controls; a message instead of a run when one is going or the options are invalid."""
        loading_text = _("loading {model} (first use takes a few seconds)…")
        if not self._imported.is_set():  # a click in the first seconds: torch is still being imported
            self.status.value = html.escape(loading_text.format(model=self.controls.model.value))
        self._ready()
        from kvlab.explorer.session import USER_ERRORS

        if self.session.running:
            self.show_message(_("A run is already in progress: this Run was ignored (press Stop to end it)."))
            return None
        request = self.controls.request()
        loading = not self.store.is_ready(request.model, request.dtype)
        # The running state is shown before the thread starts: a run that fails (or ends) at once reports from
        # its thread, and that report must come after this, never be overwritten by it.
        shown = (
            self.message.value,
            self.text.value,
            self.progress.value,
            self.progress.max,
            self.progress.bar_style,
            self.last_crop,
        )
        self.show_message("")
        self.last_crop = None
        total, working = kind_of(request.cache).progress(request)  # tokens, or requests for a kind that ends whole
        self.progress.value, self.progress.max = 0, total
        self.progress.bar_style = ""
        self.text.value = ""
        status = loading_text.format(model=request.model) if loading else working
        if self._quanto_build_pending(request):  # kvlab.run builds it before its clock starts: say why it waits
            notice = _("building optimum-quanto's C++ extension once (about 1 minute)…")
            status = f"{status} {notice}" if loading else notice
        with self._draw_lock:  # the warm-up thread's "is loaded" line must not replace this one
            self.status.value = html.escape(status)
        self._set_running(True)
        self._dirty.clear()
        try:
            run = self.session.start(request, on_token=self._on_token, on_done=self._on_done, on_error=self._on_error)
        except USER_ERRORS as err:
            message, text, value, maximum, style, self.last_crop = shown
            self.message.value, self.text.value = message, text
            self.progress.max, self.progress.value, self.progress.bar_style = maximum, value, style
            self._set_running(False)
            self.show_message(str(err), error=True)
            self.status.value = html.escape(_("not started: see the message below"))
            return None
        except BaseException:
            self._set_running(False)
            raise
        threading.Thread(target=self._draw_live, args=(run,), daemon=True, name="kvlab-explorer-draw").start()
        return run

    def _quanto_build_pending(self, request) -> bool:
        """Whether this run's quanto cache will first build optimum-quanto's C++ extension (about a minute, once)."""
        if request.cache != "quantized" or request.options.get("backend") != "quanto":
            return False
        from kvlab.caches.quantized import quanto_extension_pending

        ready = self.store.is_ready(request.model, request.dtype)
        return quanto_extension_pending(self.store.get(request.model, request.dtype)[0].device if ready else "cpu")

    def on_stop(self) -> None:
        current = self.session.current
        if self.session.running and current is not None and not kind_of(current.request.cache).streams:
            self.show_message(_(kind_of(current.request.cache).no_stop))
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
        self.show_message(
            _(
                "Added [{number}] {label} to the comparison; it stays drawn dashed on the plots and as a row of "
                "the table."
            ).format(number=len(self.session.comparison), label=run.label)
        )
        self.refresh()

    def on_clear_comparison(self) -> None:
        self.session.clear_comparison()
        self.show_message(_("Comparison cleared."))
        self.refresh()

    def on_crop(self) -> dict | None:
        """crop(-n) on the last run's cache; the refusal, with its rule, shown as a message."""
        self._ready()
        from kvlab.explorer.session import USER_ERRORS

        n = self.crop_n.value
        try:
            event = self.session.crop(n)
        except USER_ERRORS as err:
            self.show_message(str(err), error=True)
            return None
        self.last_crop = event
        lengths = sorted(set(zip(event["lengths_before"], event["lengths_after"])))
        shown = ", ".join(f"{b} → {a}" for b, a in lengths)
        self.show_message(
            _("cache.crop(-{n}): layer lengths {lengths}. Cropped positions are red on the map.").format(
                n=n, lengths=shown
            )
        )
        self.refresh()
        return event

    # -- reports from the generation thread ---------------------------------------------------------------------
    def _on_token(self, run: Run) -> None:
        """Cheap updates only: drawing happens in `_draw_live`, so the model never waits for matplotlib."""
        tokens = len(run.new_ids)
        self.progress.value = min(tokens, self.progress.max)
        self.status.value = _("generating: {tokens}/{max_new_tokens} tokens").format(
            tokens=tokens, max_new_tokens=run.request.max_new_tokens
        )
        self._dirty.set()

    def _draw_live(self, run: Run) -> None:
        """Redraw while `run` generates: first as soon as its first cache update is recorded (the prefill's first
        layer: the picture comes while the prefill goes on, not after it), then after new tokens, at most every
        `min_redraw_s`. A kind that does not stream (paged: generate_batch hands its trace over whole) is drawn
        once, when it ends."""
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
        except Exception as err:  # any error: in the generating thread: shown, or it would vanish
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

    # -- drawing ------------------------------------------------------------------------------------------------
    def _show_text(self, run: Run) -> None:
        if run.loaded_from is not None:  # no tokenizer behind a saved trace: the text it carries, if any
            saved = "text" in run.trace.meta
            text = run.result.text
            title = (
                _("generated text (saved in {file})") if saved else _("generated text (not saved in {file})")
            ).format(file=run.loaded_from)
        else:
            tokenizer = self.store.get(run.request.model, run.request.dtype)[1]
            text, title = kind_of(run.request.cache).text(run, tokenizer)
        self.text.value = (
            f'<div style="font-size:12px;color:{MUTED}">{html.escape(title)}</div><pre style="'
            f"white-space:pre-wrap;margin:0;padding:4px;border:1px solid {BORDER};max-height:8em;"
            f'overflow:auto">{html.escape(text)}</pre>'
        )

    def refresh(self, run: Run | None = None, table: bool = True, live: bool = False) -> None:
        """Redraw the plots (and the table) from the current run, the comparison and the last crop."""
        self._ready()
        from kvlab.explorer import figures

        run = run or self.session.current
        with self._draw_lock:
            if live and run.done:
                return  # the final picture is drawn by `_on_done`; a late live frame must not replace it
            if live:
                self._show_text(run)
            self.plot.value = figures.png_bytes(self._figure(run))
            if table:
                self.table.value = summary.to_html(summary.rows_for(self.session))

    # -- saving and loading (main thread) -------------------------------------------------------------------------
    def _finished_run(self) -> Run:
        run = self.session.current
        if run is None or run.result is None:
            raise ValueError(_("there is nothing to save yet: press Run (or load a trace) first"))
        if self.session.running:
            raise ValueError(_("wait for the run to finish (or Stop it) before saving"))
        return run

    def _offer(self, item: export.Export) -> export.Export:
        """Offer `item` as a download link (replacing an earlier file of the same name); write it to save_dir."""
        self._ready()
        from kvlab.explorer import export

        where = ""
        if self.save_dir is not None:
            try:
                where = _(" and written to {path}").format(path=item.write(self.save_dir))
            except OSError as err:  # the user's directory, not a bug: one line, and the download still works
                where = _("; it could not be written to {folder} ({reason})").format(
                    folder=self.save_dir, reason=err.strerror or type(err).__name__
                )
        self.exports = [e for e in self.exports if e.name != item.name] + [item]
        self.downloads.value = export.links_html(self.exports)
        self.show_message(
            _("{file} ({size}) is ready: click its link below to download it{where}.").format(
                file=item.name, size=export.size_text(len(item.data)), where=where
            )
        )
        return item

    def on_save_trace(self) -> export.Export:
        """The current run's full trace as JSON (what `Trace.save` writes, plus the label, text and token ids)."""
        self._ready()
        from kvlab.explorer import export

        return self._offer(export.trace_export(self._finished_run()))

    def on_save_figure(self) -> export.Export:
        """The picture shown now (runs, comparison, crop), drawn again at EXPORT_DPI, as PNG."""
        self._ready()
        from kvlab.explorer import export, figures

        run = self._finished_run()
        with self._draw_lock:
            png = figures.png_bytes(self._figure(run), dpi=EXPORT_DPI)
        return self._offer(export.figure_export(png, run))

    def on_save_table(self) -> export.Export:
        """The summary table (one row per run, comparison runs first) as CSV."""
        self._ready()
        from kvlab.explorer import export

        run = self._finished_run()
        return self._offer(export.table_export(self.summary_rows(), run))

    def _on_upload(self, value) -> None:
        self._ready()
        from kvlab.explorer import export

        files = export.uploaded_files(value)
        if not files:
            return  # the widget was cleared
        try:
            for name, content in files:
                self.on_load_trace(name, content)
        finally:
            self.load_button.value = ()  # the same file can be loaded again

    def on_load_trace(self, name: str, content: bytes) -> Run | None:
        """Show a saved trace (the explorer's Save trace, `kvlab run --trace`, `Trace.save`) as the current run.

        A file that is not a trace is refused with one line (TraceFormatError). The loaded run is drawn and
        tabled like a live one, can be added to the comparison and saved again; it has no cache to crop.
        """
        self._ready()
        from kvlab.explorer import export
        from kvlab.explorer.session import one_line
        from kvlab.recording.trace import TraceFormatError

        try:
            trace = export.read_trace(name, content)
            run = export.loaded_run(trace, name)
            self.session.show_loaded(run)
        except (TraceFormatError, ValueError) as err:
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
        # last: the plot and table are drawn by now
        self.status.value = _("loaded {file}: {steps} steps").format(file=name, steps=s["steps"])
        return run

    def _figure(self, run: Run | None):
        self._ready()
        from kvlab.explorer import figures

        kind = for_trace(run.trace) if run is not None else None
        if kind is not None and kind.figure is not None and run.trace.updates:
            # a kind with a picture of its own (paged: the block timeline); comparison runs stay rows of the table
            others = any(r is not run for r in self.session.comparison)
            also = " " + _("(comparison runs: rows of the table)") if others else ""
            return kind.figure(run.snapshot(), run.label + also)
        current = (run.label, run.snapshot()) if run is not None else None
        rows = run.layer_rows() if run is not None else []
        comparison = [(r.label, r.result.trace) for r in self.session.comparison if r is not run]
        status = (
            _("{label}: {steps} steps").format(label=run.label, steps=current[1].summary()["steps"])
            if run is not None
            else ""
        )
        return figures.dashboard(current, rows, comparison, crop=self.last_crop, status=status)

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


def explore(model=None, tokenizer=None, lang: str | None = None, **kwargs) -> Explorer:
    """The Cache Explorer. Pass an already-loaded `model` (and its `tokenizer`) to explore it; otherwise choose a
    bundled model (SmolLM2, Gemma 3) or a tiny random one in the app. `preload=True` loads the default model in
    the background so the first Run starts at once. Save trace / figure / table offer the file as a download
    link; with `save_dir="."` they are also written there (the message prints the path). Load trace takes a
    trace saved by the explorer, `kvlab run --trace` or `Trace.save`. `lang="pt-BR"` shows labels, plots and
    messages in Portuguese (as `kvlab.set_language` does for everything kvlab draws)."""
    if lang is not None:
        from kvlab.i18n import set_language

        set_language(lang)
    return Explorer(model, tokenizer, **kwargs)
