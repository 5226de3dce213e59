"""Text that does not fit its figure: cut off, or printed over a title or axis label. Nobody sees that in a diff,
so `tools.notebook_exec` checks every figure each notebook cell shows (`record_in_kernel`).

The limit is the canvas (figsize × dpi): a live control's frame (`png_bytes`) cuts what lies past it, and inline
(`bbox_inches="tight"`) a text past it widens the image and shrinks the plots. Inside the canvas a text may lie
outside its axes (tick labels, a legend beside them: tight_layout makes room), but a clipping text must stay in
its clip region. Only titles and axis labels are checked for being covered: crowded tick or bar labels are placed
by the data, and their fix lies in the spacing.

The same draw gives every text a reader sees (`visible_texts`: tick labels as their formatter wrote them), which
`tools.notebook_exec` records so that a pt-BR figure can be checked for English words and number marks.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from kvlab.atomic import write_text
from kvlab.plots._figure import DATA_TEXT

TOLERANCE_PX = 1.0  # text extents come from font metrics; antialiasing and hinting move an edge by under a pixel


@contextlib.contextmanager
def _recording_text_draws(drawn: list):
    """While active, every Text that draws itself is appended to `drawn` as (text, extent, region it may fill).
    Only the draw knows which texts it draws (tick labels made anew, hidden axes and legends, an annotation whose
    point leaves the axes), so `Text.draw`, which `Annotation.draw` calls too, is wrapped for one draw."""
    original = Text.draw

    def draw(text, renderer):
        original(text, renderer)
        if text.get_visible() and text.get_text().strip():  # what Text.draw itself skips
            drawn.append((text, text.get_window_extent(renderer), _region(text)))

    Text.draw = draw
    try:
        yield
    finally:
        Text.draw = original


def _region(text: Text) -> Bbox | None:
    """Where `text` can show in display pixels: its canvas, cut to its clip box and path; None when nowhere."""
    region = text.get_figure(root=True).bbox
    if not text.get_clip_on():
        return region
    path = text.get_clip_path()
    for box in (text.get_clip_box(), None if path is None else path.get_fully_transformed_path().get_extents()):
        if box is not None and region is not None:
            region = Bbox.intersection(region, box)
    return region


def _headings(fig: Figure) -> list[Text]:
    """The figure's and every axes' titles and axis labels, which no other text may cover (the left and right
    titles and the suptitle have no public accessor)."""
    texts = [getattr(fig, name, None) for name in ("_suptitle", "_supxlabel", "_supylabel")]
    for ax in _all_axes(fig.axes):
        texts += [ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None)]
        texts += [ax.xaxis.label, ax.yaxis.label]
    return [text for text in texts if text is not None]


def _all_axes(axes) -> list:
    """`axes` and, after each, its insets (`Axes.inset_axes` does not add them to fig.axes)."""
    return [each for ax in axes for each in (ax, *_all_axes(ax.child_axes))]


def _owners(fig: Figure) -> dict[int, int]:
    """id(text) -> index in fig.axes of its axes (an inset's: its parent's); none for a figure-level text."""
    return {id(text): index for index, ax in enumerate(fig.axes) for text in ax.findobj(Text)}


def _sticks_out(extent: Bbox, region: Bbox | None, tolerance: float) -> bool:
    if region is None:
        return True
    room = region.padded(tolerance)
    return extent.x0 < room.x0 or extent.y0 < room.y0 or extent.x1 > room.x1 or extent.y1 > room.y1


def _overlap(a: Bbox, b: Bbox, tolerance: float) -> bool:
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width > tolerance and height > tolerance


def _drawn_texts(fig: Figure) -> list[tuple[Text, Bbox, Bbox | None]]:
    """Every visible, non-blank text of `fig` as one draw (without rasterizing) draws it, in draw order, with its
    extent and the region it may fill: positions and tick labels are known only after a draw."""
    drawn: list[tuple[Text, Bbox, Bbox | None]] = []
    with _recording_text_draws(drawn):
        fig.draw_without_rendering()
    return drawn


def overflowing_texts(fig: Figure, tolerance: float = TOLERANCE_PX, drawn=None) -> list[dict]:
    """Every visible text of `fig` cut off ("outside", in draw order), then every one covering a title or axis
    label ("overlap", with the one it covers as "with"): {"text", "kind", "axes": index in fig.axes, None for the
    figure's own}. It draws the figure, unless given what a draw drew (`drawn`, from `_drawn_texts`)."""
    drawn = _drawn_texts(fig) if drawn is None else drawn
    owners = _owners(fig)
    headings = {id(text) for text in _headings(fig)}
    found = [
        {"text": text.get_text(), "kind": "outside", "axes": owners.get(id(text))}
        for text, extent, region in drawn
        if _sticks_out(extent, region, tolerance)
    ]
    named = [(text, extent) for text, extent, _ in drawn if id(text) in headings]
    covered = set()  # two titles running into each other are one finding, not two
    for text, extent, _ in drawn:
        for heading, heading_extent in named:
            pair = frozenset((id(text), id(heading)))
            if heading is not text and pair not in covered and _overlap(extent, heading_extent, tolerance):
                covered.add(pair)
                overlap = {"text": text.get_text(), "kind": "overlap", "axes": owners.get(id(text))}
                found.append({**overlap, "with": heading.get_text()})
    return found


def _tick_axes(fig: Figure) -> dict[int, object]:
    """id(tick label or offset text) -> its Axis, for every axis of every axes (insets and colorbars included)."""
    found = {}
    for ax in _all_axes(fig.axes):
        for axis in (ax.xaxis, ax.yaxis):
            ticks = axis.majorTicks + axis.minorTicks
            for text in [axis.offsetText] + [label for tick in ticks for label in (tick.label1, tick.label2)]:
                found[id(text)] = axis
    return found


def visible_texts(fig: Figure, drawn=None) -> dict:
    """What a reader of `fig` can read, as drawn: {"texts": titles, axis labels, legend entries, annotations and
    any other text, in draw order; "ticks": one list per axis that shows tick labels (after its formatter: the
    text on the figure), with its offset text ("1e6") last; "data": texts marked as the model's own (gid
    `DATA_TEXT`: tokens), in no reader's language}. Each text once per list; it draws the figure, unless given
    what a draw drew (`drawn`, from `_drawn_texts`)."""
    drawn = _drawn_texts(fig) if drawn is None else drawn
    axis_of = _tick_axes(fig)
    texts: list[str] = []
    data: list[str] = []
    ticks: dict[int, list[str]] = {}
    for text, _extent, _region in drawn:
        axis = axis_of.get(id(text))
        shown = ticks.setdefault(id(axis), []) if axis is not None else data if text.get_gid() == DATA_TEXT else texts
        if text.get_text() not in shown:
            shown.append(text.get_text())
    return {"texts": texts, "ticks": list(ticks.values()), "data": data}


def _shown_figure(obj) -> Figure | None:
    """The figure a displayed object shows: a Figure, or the `figure` a `kvlab.live.LiveControl` holds (read from
    its `__dict__`, so that no `__getattr__` of an arbitrary displayed object runs)."""
    if isinstance(obj, Figure):
        return obj
    held = getattr(obj, "__dict__", {}).get("figure")
    return held if isinstance(held, Figure) else None


def _inspect(figure: Figure) -> tuple[list[dict], dict]:
    """`overflowing_texts` and `visible_texts` of `figure`, from one draw. A figure that fails to draw is a finding
    of kind "error" with no texts (a raising callback would print into the cell)."""
    try:
        drawn = _drawn_texts(figure)
        return overflowing_texts(figure, drawn=drawn), visible_texts(figure, drawn=drawn)
    except Exception as err:  # reported, never raised
        return [{"text": f"{type(err).__name__}: {err}", "kind": "error", "axes": None}], {
            "texts": [],
            "ticks": [],
            "data": [],
        }


def record_in_kernel(shell, path: str | Path, texts_path: str | Path | None = None) -> None:
    """In an IPython kernel: after each cell, check every figure it showed and every pyplot figure still open, and
    write all findings so far to `path` (a JSON list; each finding with the cell's "execution_count" and the
    "figure" index among the cell's), nothing to the cell's outputs. A kvlab plot is no pyplot figure, so figures
    are caught as IPython formats them for display (wrapping `display_formatter.format`); pyplot's are taken from
    its list before the inline backend closes them. A figure that fails to draw is a finding of kind "error" (a
    raising callback would print into the cell). `path` holds "[]" from the start: no file, the check never ran.
    With `texts_path`, every figure's `visible_texts` go there the same way, one entry per figure (so that the
    words a reader sees can be checked against the language, tests/i18n/test_figure_words.py)."""
    findings: list[dict] = []
    seen: list[dict] = []
    shown: list[Figure] = []
    formatter = shell.display_formatter
    original_format = formatter.format

    def format(obj, *args, **kwargs):
        figure = _shown_figure(obj)
        if figure is not None and all(figure is not known for known in shown):
            shown.append(figure)
        return original_format(obj, *args, **kwargs)

    def pre_execute():
        shown.clear()

    def post_execute():
        figures = list(shown)
        helpers = sys.modules.get("matplotlib._pylab_helpers")  # pyplot in use: its open figures
        for manager in helpers.Gcf.get_all_fig_managers() if helpers else []:
            if all(manager.canvas.figure is not known for known in figures):
                figures.append(manager.canvas.figure)
        if not figures:
            return
        count = shell.last_execution_result.execution_count  # the cell's: shell.execution_count may be the next's
        new = []
        for index, figure in enumerate(figures):
            found, readable = _inspect(figure)
            new += [{"execution_count": count, "figure": index, **finding} for finding in found]
            seen.append({"execution_count": count, "figure": index, **readable})
        if new:
            findings.extend(new)
            write_text(path, json.dumps(findings, ensure_ascii=False))
        if texts_path is not None:
            write_text(texts_path, json.dumps(seen, ensure_ascii=False))

    write_text(path, "[]")
    if texts_path is not None:
        write_text(texts_path, "[]")
    formatter.format = format
    shell.events.register("pre_execute", pre_execute)
    shell.events.register("post_execute", post_execute)
