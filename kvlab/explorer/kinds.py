"""Every cache kind the explorer offers, described once: its controls, checks, start, reports, picture and row.

Callers ask a kind (`kind_of(name)`, `for_trace(trace)`) rather than test which kind it is. `ExplorerKind`: the kinds
`generate` builds, one prompt streamed token by token, the cache kept to crop. `PagedKind`: continuous batching,
several requests through `model.generate_batch`, ended whole (no Stop, nothing to crop), drawn as a block timeline.
Torch-free: the controls read it before torch is imported.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvlab.cache_kinds import BY_NAME as RECORDS
from kvlab.cache_kinds import CACHE_KINDS, PAGED
from kvlab.caches.options import check_paged_options
from kvlab.explorer.models import ByteTokenizer
from kvlab.explorer.run_values import Run, RunRequest
from kvlab.i18n import C_, N_, _, cache_kind_label, marks, number
from kvlab.measure.paged import is_paged_trace, paged_row_fields, paged_summary
from kvlab.serving.batch_run import MAX_REQUESTS

if TYPE_CHECKING:  # its module imports torch
    from kvlab.recording.trace import Trace


class ExplorerKind:
    """A kind `generate` builds; its attributes and methods are what every kind answers (`PagedKind` the other)."""

    label = ""  # its text in the cache menu, English, shown through `_()`; empty: its name
    uses_prompt = True  # the prompt controls apply (the paged kind brings its own requests)
    streams = True  # a report per token, live redraws and Stop; False: it ends whole, drawn once at the end
    crops = True  # its cache is kept after the run, to crop
    no_stop = ""  # why Stop cannot end a run that does not stream (English, shown through `_()`)
    no_crop = ""  # why a run that does not crop has nothing to crop (English, shown through `_()`)
    figure = None  # a method `figure(trace, title)` for a kind with a picture of its own (None: the dashboard)
    row_fields = None  # a method `row_fields(trace)` for a kind whose summary-table row adds fields
    columns: tuple[tuple[str, str], ...] = ()  # the columns of those fields, shown when a row has them
    note = ""  # a note under the table when a row has them

    def __init__(self, name: str):
        self.name = name  # the `cache_kind`: the cache menu's value, the request's `cache`, a trace's meta's
        record = RECORDS[name]
        self.options = (*record.options, *(("past_recording",) if record.records_past else ()))  # its widgets

    @property
    def cache(self):
        """What `kvlab.run` and the request check take as `cache`: the kind's name (a strategy: its class)."""
        return self.name

    def shown(self) -> str:
        """The cache menu's text: the kind in the reader's words ("estático"); "none" says it keeps no cache."""
        if self.label:
            return _(self.label)
        return C_("cache menu", "none") if self.name == "none" else cache_kind_label(self.name)

    def check(self, request: RunRequest, loaded: tuple | None) -> None:
        """`kvlab.run`'s checks: the option rules, then, with (model, tokenizer) `loaded`, its layers, memory and
        positions (unloaded, `kvlab.run` checks those in the worker)."""
        from kvlab.request import Request
        from kvlab.rules import check

        if not request.prompt.strip():
            raise ValueError(_("the prompt is empty; type some text or choose a preset"))
        unloaded = Request(self.cache, request.options, past_recording=request.past_recording)
        check(unloaded)
        if loaded is None:
            return
        from kvlab.explorer.prompts import encode_prompt
        from kvlab.watched_generate import cache_device

        model, tokenizer = loaded
        prompt = encode_prompt(tokenizer, request.prompt, request.prompt_tokens, chat=request.chat)  # (1, n)
        lengths = {"prompt_tokens": prompt.shape[-1], "new_tokens": request.max_new_tokens}
        check(replace(unloaded, facts=model.config, dtype=model.dtype, device=cache_device(model), **lengths))

    def start(self, run: Run, model, tokenizer, on_token, stop) -> None:
        """Runs it in the session's thread."""
        from kvlab.explorer.generation import generate_run

        generate_run(run, model, tokenizer, on_token, stop, cache=self.cache)

    def progress(self, request: RunRequest) -> tuple[int, str]:
        """The progress bar's end and the status while it runs."""
        return request.max_new_tokens, _("prefill…")

    def finished(self, run: Run) -> tuple[int, str, str, str | None]:
        """Once it has finished: the progress, the bar's style, the status and a note (None: none)."""
        result = run.result
        assert result is not None
        tokens, stopped = len(result.generated_token_ids), result.trace.meta.get("stopped")
        status = (
            _("stopped after {tokens} tokens ({prompt_tokens}-token prompt) in {seconds} s")
            if stopped
            else _("done: {tokens} tokens ({prompt_tokens}-token prompt) in {seconds} s")
        ).format(tokens=tokens, prompt_tokens=run.prompt_tokens, seconds=number(result.seconds, 2, grouping=False))
        note = _("Stopped: the partial trace is kept (plots and table show the steps that ran).") if stopped else None
        return tokens, "warning" if stopped else "success", status, note

    def text(self, run: Run, tokenizer) -> tuple[str, str]:
        """The generated text and its title."""
        return tokenizer.decode(run.new_ids, skip_special_tokens=True), _("generated text")

    def reads(self, trace: Trace) -> bool:
        """Whether a trace (live or loaded) is this kind's own record."""
        return True


PAGED_LABEL = N_("paged (generate_batch)")


class PagedKind(ExplorerKind):
    """Continuous batching, `model.generate_batch(...)`; a tiny random model serves seeded random token prompts."""

    label = PAGED_LABEL
    uses_prompt = streams = crops = False
    no_stop = N_("generate_batch cannot be stopped midway: the paged run ends when every request is done.")
    no_crop = N_(
        "a paged run's blocks went back to the pool when generate_batch returned: there is no cache left to crop"
    )
    columns = (
        ("blocks_peak", N_("blocks peak")),
        ("num_blocks", N_("pool blocks")),
        ("requests_waited", N_("waited")),
        ("preemptions", N_("preempted")),
    )
    note = N_(
        "paged: every block is back in the pool after generate_batch (slots now 0); waste % = empty slots of "
        "handed-out blocks, averaged over forwards"
    )
    reads = staticmethod(is_paged_trace)
    row_fields = staticmethod(paged_row_fields)

    def check(self, request: RunRequest, loaded: tuple | None) -> None:
        check_paged_options(request.options, MAX_REQUESTS)
        if loaded is not None:
            from kvlab.caches.paged import check_paged_model

            check_paged_model(loaded[0])

    def start(self, run: Run, model, tokenizer, on_token, stop) -> None:
        """`generate_batch` hands the trace over whole: no report per token, and `stop` cannot end it."""
        from kvlab.serving.batch_run import generate_paged

        random_tokens = isinstance(tokenizer, ByteTokenizer)
        result = generate_paged(
            model, tokenizer, run.request.options, run.request.max_new_tokens, random_tokens=random_tokens
        )
        run.trace, run.prompt_tokens = result.trace, result.prompt_tokens
        run.new_ids, run.result = list(result.generated_token_ids), result

    def progress(self, request: RunRequest) -> tuple[int, str]:
        requests = request.options["requests"]
        return requests, _("generate_batch: serving {requests} requests…").format(requests=requests)

    def finished(self, run: Run) -> tuple[int, str, str, str | None]:
        result = run.result
        assert result is not None
        requests = len(result.trace.meta.get("paged_requests", []))
        status = _(
            "done: {requests} requests, {new_tokens} new tokens ({prompt_tokens} prompt tokens) in "
            "{seconds} s, {forwards} forwards"
        ).format(
            requests=requests,
            new_tokens=len(result.generated_token_ids),
            prompt_tokens=run.prompt_tokens,
            seconds=number(result.seconds, 2, grouping=False),
            forwards=result.trace.summary()["steps"],
        )
        return requests, "success", status, None

    def text(self, run: Run, tokenizer) -> tuple[str, str]:
        return (run.result.text if run.result is not None else ""), _("generated text, per request")  # one line each

    def figure(self, trace: Trace, title: str = ""):
        """The block timeline of a paged trace."""
        from kvlab.plots.blocks import plot_block_timeline

        s = paged_summary(trace)
        percent = marks(str(s["fragmentation_pct_mean"]))
        detail = _("{blocks} blocks of {page_size}: peak {peak} in use, {percent}% of handed-out slots empty").format(
            blocks=s["num_blocks"], page_size=s["page_size"], peak=s["peak_blocks_in_use"], percent=percent
        )
        return plot_block_timeline(trace, title=f"{title}\n{detail}" if title else detail)


class StrategyKind(ExplorerKind):
    """A strategy of the user's: a transformers layer class defined in the notebook's kernel (or a file), offered in
    the cache menu under its class name; run as `kvlab.run(..., cache=TheClass)`, with no options of its own (its
    constructor's defaults)."""

    def __init__(self, layer_class: type):
        self.name, self.layer_class, self.options = layer_class.__name__, layer_class, ()

    @property
    def cache(self):
        return self.layer_class


# In the cache menu's order: transformers' cache kinds, then continuous batching, then the strategies offered.
KINDS = (*(ExplorerKind(name) for name in CACHE_KINDS), PagedKind(PAGED))
BY_NAME: dict[str | None, ExplorerKind] = {kind.name: kind for kind in KINDS}
DEFAULT = BY_NAME["dynamic"]
STRATEGIES: dict[str, StrategyKind] = {}  # offered by `kvlab.explore(strategies=[...])`, by class name


def offer_strategies(layer_classes) -> None:
    """Offer each layer class (or "FILE.py:ClassName") in the cache menu, checked first (`StrategyError` if not a
    layer class kvlab reads); a class defined again under the same name (a re-run cell) replaces the old one."""
    from kvlab.strategies.load import StrategyError, load_strategy

    for layer_class in (load_strategy(each) for each in layer_classes):
        if layer_class.__name__ in BY_NAME:
            raise StrategyError(
                _("a strategy cannot be named {name}, a cache kind's name; rename the class").format(
                    name=layer_class.__name__
                )
            )
        STRATEGIES[layer_class.__name__] = StrategyKind(layer_class)


def offered() -> tuple[ExplorerKind, ...]:
    """The cache menu: the kinds, then the strategies offered."""
    return (*KINDS, *STRATEGIES.values())


def kind_of(name: str | None) -> ExplorerKind:
    """The kind (or offered strategy) called `name`; one the explorer does not offer (a loaded "encoder_decoder")
    reads as "dynamic"."""
    return BY_NAME.get(name) or STRATEGIES.get(str(name)) or DEFAULT


def for_trace(trace: Trace) -> ExplorerKind:
    """The kind whose record `trace` is: its `cache_kind` when the trace carries what that kind reads (a paged
    trace its pool's geometry), else "dynamic"."""
    kind = kind_of(trace.meta.get("cache_kind"))
    return kind if kind.reads(trace) else DEFAULT
