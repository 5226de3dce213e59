"""Every cache kind the explorer offers, described once: what the controls show, how a run is checked and started,
how it reports, what is drawn and what its row of the table adds.

The controls, the session, the app and the summary table read a kind's `ExplorerKind` instead of asking which
kind it is. Two ways of running exist:
- the kinds `generate` builds (`kvlab.cache_kinds.CACHE_KINDS`): one prompt through `kvlab.run` in the session's
  thread, a report per token (progress, live redraws, Stop), the cache kept afterwards to crop;
- the paged kind (continuous batching): several requests through `model.generate_batch(...)`
  (`kvlab.serving.batch_run.generate_paged`), with requests of its own instead of the prompt controls. It ends
  whole (no report per token, no Stop: it is drawn once, when `generate_batch` returns), its blocks are back in
  the pool by then (nothing to crop), its picture is the block timeline (`kvlab.plots.blocks`) and its row adds
  the blocks at the peak, the requests that waited and the preemptions (`kvlab.measure.paged.paged_row_fields`).
  With a tiny random model (its `ByteTokenizer`) the requests are seeded random token prompts.

This module imports no torch (the controls read it before torch is imported); what a kind runs is imported when it
runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvlab.cache_kinds import CACHE_KINDS, KIND_OPTIONS, PAGED
from kvlab.caches.options import PAST_RECORDING_KINDS, check_options, check_paged_options
from kvlab.i18n import N_, _, marks, number
from kvlab.measure.paged import is_paged_trace, paged_row_fields
from kvlab.serving.batch_run import MAX_REQUESTS

if TYPE_CHECKING:
    from kvlab.explorer.session import Run, RunRequest
    from kvlab.recording.trace import Trace


def _token_progress(request: RunRequest) -> tuple[int, str]:
    return request.max_new_tokens, _("prefill…")


def _tokens_finished(run: Run) -> tuple[int, str, str, str | None]:
    result = run.result
    assert result is not None  # the app asks once the run has finished
    stopped = result.trace.meta.get("stopped")
    finished = (
        _("stopped after {tokens} tokens ({prompt_tokens}-token prompt) in {seconds} s")
        if stopped
        else _("done: {tokens} tokens ({prompt_tokens}-token prompt) in {seconds} s")
    )
    status = finished.format(
        tokens=len(result.generated_token_ids),
        prompt_tokens=run.prompt_tokens,
        seconds=number(result.seconds, 2, grouping=False),
    )
    message = _("Stopped: the partial trace is kept (plots and table show the steps that ran).") if stopped else None
    return len(result.generated_token_ids), "warning" if stopped else "success", status, message


def _decoded_text(run: Run, tokenizer) -> tuple[str, str]:
    return tokenizer.decode(run.new_ids, skip_special_tokens=True), _("generated text")


def _any_trace(trace: Trace) -> bool:
    return True


@dataclass(frozen=True)
class ExplorerKind:
    """What the explorer does with one cache kind (the module docstring says what differs between them)."""

    name: str  # the `cache_kind`: the cache menu's value, the request's `cache`, the trace's meta["cache_kind"]
    options: tuple[str, ...]  # its option widgets (quantized's fp8 backend hides its group-wise ones: `options_for`)
    check: Callable[[RunRequest, tuple | None], None]  # its checks: without the model, then with (model, tokenizer)
    start: Callable[..., None]  # runs it in the session's thread: (run, model, tokenizer, on_token, stop)
    label: str = ""  # its text in the cache menu, English, shown through `_()`; empty: its name
    uses_prompt: bool = True  # the prompt controls apply (the paged kind brings its own requests)
    streams: bool = True  # a report per token, live redraws and Stop; False: it ends whole, drawn once at the end
    crops: bool = True  # its cache is kept after the run, to crop
    no_stop: str = ""  # why Stop cannot end a run that does not stream (English, shown through `_()`)
    no_crop: str = ""  # why a run that does not crop has nothing to crop (English, shown through `_()`)
    progress: Callable[[RunRequest], tuple[int, str]] = _token_progress  # the progress bar's end, the running status
    finished: Callable[[Run], tuple[int, str, str, str | None]] = _tokens_finished  # progress, bar style, status, note
    text: Callable[[Run, object], tuple[str, str]] = _decoded_text  # the generated text and its title
    reads: Callable[[Trace], bool] = _any_trace  # whether a trace (live or loaded) is this kind's own record
    figure: Callable[[Trace, str], object] | None = None  # its own picture of a trace (None: the dashboard)
    row_fields: Callable[[Trace], dict] | None = None  # what its summary-table row adds
    columns: tuple[tuple[str, str], ...] = ()  # the columns of those fields, shown when a row has them
    note: str = ""  # a note under the table when a row has them

    def shown(self) -> str:
        """The cache menu's text: the kind's name, or its label in the language in use."""
        return _(self.label) if self.label else self.name


# -- the kinds generate builds ----------------------------------------------------------------------------------
def _check_generate(request: RunRequest, loaded: tuple | None) -> None:
    """`kvlab.run`'s checks: the option rules without the model, and with it (once loaded) the rules on its layer
    kinds and shapes, then the request's (its cache fits in memory, its tokens in the model's positions)."""
    if not request.prompt.strip():
        raise ValueError(_("the prompt is empty; type some text or choose a preset"))
    check_options(request.cache, request.options, past_recording=request.past_recording)
    if loaded is None:
        return  # unloaded, kvlab.run checks the rest in the worker, after the load
    from kvlab.explorer.prompts import encode_prompt
    from kvlab.model_facts import model_facts
    from kvlab.size.request_rules import check_request
    from kvlab.watched_generate import cache_device

    model, tokenizer = loaded
    facts = model_facts(model.config)  # read once, for the option and the request checks
    ids = encode_prompt(tokenizer, request.prompt, request.prompt_tokens, chat=request.chat)
    check_options(
        request.cache,
        request.options,
        facts,
        prompt_tokens=ids.shape[-1],
        max_new_tokens=request.max_new_tokens,
        past_recording=request.past_recording,
    )
    check_request(
        facts,
        request.cache,
        request.options,
        prompt_tokens=ids.shape[-1],
        max_new_tokens=request.max_new_tokens,
        dtype=model.dtype,
        device=cache_device(model),
    )


def _start_generate(run: Run, model, tokenizer, on_token, stop) -> None:
    from kvlab.explorer.session import generate_run  # the run's thread: torch is imported by now

    generate_run(run, model, tokenizer, on_token, stop)


def _generate_kind(name: str) -> ExplorerKind:
    past = ("past_recording",) if name in PAST_RECORDING_KINDS else ()
    return ExplorerKind(name, (*KIND_OPTIONS[name], *past), _check_generate, _start_generate)


# -- the paged kind: continuous batching ------------------------------------------------------------------------
PAGED_LABEL = N_("paged (generate_batch)")
PAGED_COLUMNS = (
    ("blocks_peak", N_("blocks peak")),
    ("num_blocks", N_("pool blocks")),
    ("requests_waited", N_("waited")),
    ("preemptions", N_("preempted")),
)
PAGED_NOTE = N_(
    "paged: every block is back in the pool after generate_batch (slots now 0); waste % = empty slots of "
    "handed-out blocks, averaged over forwards"
)


def _check_paged(request: RunRequest, loaded: tuple | None) -> None:
    """Its options; its model's layers (full attention only) once the model is known."""
    check_paged_options(request.options, MAX_REQUESTS)
    if loaded is not None:
        from kvlab.caches.paged import check_paged_model

        check_paged_model(loaded[0])


def _start_paged(run: Run, model, tokenizer, on_token, stop) -> None:
    """`generate_batch` hands the trace over whole: no report per token, and `stop` cannot end it."""
    from kvlab.explorer.models import ByteTokenizer
    from kvlab.serving import batch_run

    random_tokens = isinstance(tokenizer, ByteTokenizer)  # a tiny random model: seeded random token requests
    request = run.request
    result = batch_run.generate_paged(
        model, tokenizer, request.options, request.max_new_tokens, random_tokens=random_tokens
    )
    run.trace, run.prompt_tokens = result.trace, result.prompt_tokens
    run.new_ids, run.result = list(result.generated_token_ids), result


def _requests_progress(request: RunRequest) -> tuple[int, str]:
    requests = request.options["requests"]
    return requests, _("generate_batch: serving {requests} requests…").format(requests=requests)


def _requests_finished(run: Run) -> tuple[int, str, str, str | None]:
    result = run.result
    assert result is not None  # the app asks once the run has finished
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


def _requests_text(run: Run, tokenizer) -> tuple[str, str]:
    return (run.result.text if run.result is not None else ""), _("generated text, per request")  # one line each


def _block_timeline(trace: Trace, title: str = ""):
    """The block timeline (`kvlab.plots.blocks.plot_block_timeline`) of a paged trace, on a bare Figure."""
    from kvlab.measure.paged import paged_summary
    from kvlab.plots.blocks import plot_block_timeline

    s = paged_summary(trace)
    detail = _("{blocks} blocks of {page_size}: peak {peak} in use, {percent} % of handed-out slots empty").format(
        blocks=s["num_blocks"],
        page_size=s["page_size"],
        peak=s["peak_blocks_in_use"],
        percent=marks(str(s["fragmentation_pct_mean"])),
    )
    return plot_block_timeline(trace, title=f"{title}\n{detail}" if title else detail)


PAGED_KIND = ExplorerKind(
    PAGED,
    KIND_OPTIONS[PAGED],
    _check_paged,
    _start_paged,
    label=PAGED_LABEL,
    uses_prompt=False,
    streams=False,
    crops=False,
    no_stop=N_("generate_batch cannot be stopped midway: the paged run ends when every request is done."),
    no_crop=N_(
        "a paged run's blocks went back to the pool when generate_batch returned: there is no cache left to crop"
    ),
    progress=_requests_progress,
    finished=_requests_finished,
    text=_requests_text,
    reads=is_paged_trace,
    figure=_block_timeline,
    row_fields=paged_row_fields,
    columns=PAGED_COLUMNS,
    note=PAGED_NOTE,
)

# Every kind the explorer offers, in the cache menu's order: transformers' cache kinds, then continuous batching.
KINDS = (*(_generate_kind(name) for name in CACHE_KINDS), PAGED_KIND)
BY_NAME: dict[str | None, ExplorerKind] = {kind.name: kind for kind in KINDS}
DEFAULT = BY_NAME["dynamic"]


def kind_of(name: str | None) -> ExplorerKind:
    """The description of the kind called `name`; a name the explorer does not offer (a loaded trace's
    "encoder_decoder") runs and reads as a kind `generate` builds, whose checks refuse what is not one."""
    return BY_NAME.get(name, DEFAULT)


def for_trace(trace: Trace) -> ExplorerKind:
    """The kind whose record `trace` is (live or loaded from a file): its `cache_kind`, when the trace carries what
    that kind reads (a paged trace its pool's geometry); otherwise a kind `generate` builds."""
    kind = kind_of(trace.meta.get("cache_kind"))
    return kind if kind.reads(trace) else DEFAULT
