"""Text that does not fit its figure: cut off at the image's edge, or printed over another panel's title.

A layout made for English can break in Portuguese, whose labels run longer: a title wider than the figure, two
subplot titles running into each other. Nobody sees that in a diff, so `overflowing_texts` looks for it in the
drawn figure, and `kvlab.notebook_exec` runs it on every figure each notebook cell shows (`record_in_kernel`).

What "overflow" means for the saved PNG. A kvlab figure reaches a reader as one of two PNGs: inline, IPython saves
it with `bbox_inches="tight"`, which grows or crops the image to whatever was drawn; in a live control
(`kvlab.live`, `kvlab.plots.png.png_bytes`) it is saved as its canvas, figsize × dpi, and whatever lies past the
canvas's edge is cut off. The canvas is therefore the limit in both: a text past it is cut in a live frame, and
inline it widens the picture around a title that runs past the plots (the image is no longer the layout's size,
and the plots shrink on the page). Inside the canvas a text may lie outside its axes: axis labels, tick labels
and a `legend_beside` legend do, by design, and `tight_layout` (which every kvlab plot ends with) makes room for
them within the canvas. A text that clips (`clip_on` with a clip box or path, such as an annotation clipped to its
axes) must also stay inside its clip region, or part of it is not drawn. Both cases are "outside".

"overlap" is a text that covers a title or an axis label, of its own axes or another's: two subplot titles side
by side, a suptitle on a panel's title, a y label taller than its axes running into their title, a legend on the
next panel's y label. `tight_layout` pads panels apart by their titles and labels, but not when they cannot fit,
and then words print over words. Every text is compared with the titles and labels only: two tick labels or two
bar labels crowding each other are not looked for (the data place them, and a fix lies in their spacing).
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

TOLERANCE_PX = 1.0  # text extents come from font metrics; antialiasing and hinting move an edge by under a pixel


@contextlib.contextmanager
def _recording_text_draws(drawn: list):
    """While active, every Text that draws itself is appended to `drawn` as (text, extent, region it may fill).

    Only the draw knows which texts it draws: tick labels are made anew for each draw's ticks, a hidden axis or
    legend skips its texts, an annotation whose point leaves the axes is skipped. So `Text.draw` (which
    `Annotation.draw` calls too) is wrapped for the length of one draw, and restored after it."""
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
    """Where `text` can show in display pixels: its figure's canvas, cut down to its clip box and clip path when
    it clips; None when nothing of it can show."""
    region = text.get_figure(root=True).bbox
    if not text.get_clip_on():
        return region
    boxes = [text.get_clip_box()]
    path = text.get_clip_path()
    if path is not None:
        boxes.append(path.get_fully_transformed_path().get_extents())
    for box in boxes:
        if box is not None and region is not None:
            region = Bbox.intersection(region, box)
    return region


def _headings(fig: Figure) -> list[Text]:
    """The figure's and every axes' titles and axis labels: the texts that name a panel, which no other text may
    cover. The left and right titles and the suptitle have no public accessor."""
    texts = [getattr(fig, name, None) for name in ("_suptitle", "_supxlabel", "_supylabel")]
    for ax in _all_axes(fig):
        texts += [ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None)]
        texts += [ax.xaxis.label, ax.yaxis.label]
    return [text for text in texts if text is not None]


def _all_axes(fig: Figure) -> list:
    """fig.axes and, after each, the axes nested in it (an inset: `Axes.inset_axes` does not add it to fig.axes)."""
    found = []

    def add(ax):
        found.append(ax)
        for child in ax.child_axes:
            add(child)

    for ax in fig.axes:
        add(ax)
    return found


def _owners(fig: Figure) -> dict[int, int]:
    """id(text) -> the index in fig.axes of the axes it belongs to (an inset's texts: its parent's); a figure-level
    text (suptitle, figure legend) has none."""
    return {id(text): index for index, ax in enumerate(fig.axes) for text in ax.findobj(Text)}


def _sticks_out(extent: Bbox, region: Bbox | None, tolerance: float) -> bool:
    if region is None:
        return True
    return (
        extent.x0 < region.x0 - tolerance
        or extent.y0 < region.y0 - tolerance
        or extent.x1 > region.x1 + tolerance
        or extent.y1 > region.y1 + tolerance
    )


def _overlap(a: Bbox, b: Bbox, tolerance: float) -> bool:
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width > tolerance and height > tolerance


def overflowing_texts(fig: Figure, tolerance: float = TOLERANCE_PX) -> list[dict]:
    """Every visible text of `fig` that is cut off, or covers a title or axis label (see the module's docstring for
    why the canvas is the limit): the outside ones in draw order, then the overlaps.

    Each is {"text": its string, "kind": "outside" | "overlap", "axes": the index in fig.axes of the axes it
    belongs to, None for the figure's own texts}; an overlap also names the text it covers, "with". Drawing the
    figure (without rasterizing) is part of the check: positions are known only after a draw."""
    drawn: list[tuple[Text, Bbox, Bbox | None]] = []
    with _recording_text_draws(drawn):
        fig.draw_without_rendering()
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


def _shown_figure(obj) -> Figure | None:
    """The figure a displayed object shows: a Figure itself, or the `figure` a `kvlab.live.LiveControl` holds
    (read from the instance's own attributes, so no `__getattr__` of an arbitrary object runs)."""
    if isinstance(obj, Figure):
        return obj
    held = getattr(obj, "__dict__", {}).get("figure")
    return held if isinstance(held, Figure) else None


def record_in_kernel(shell, path: str | Path) -> None:
    """In an IPython kernel: after each cell, check every figure it showed and every pyplot figure still open, and
    write all findings so far to `path` (a JSON list, each finding with the cell's "execution_count" and the
    "figure" index among those the cell showed). Nothing goes to the cell's outputs.

    A kvlab plot is a bare Figure, not a pyplot one, so no list of open figures holds it: the figures are caught
    as IPython formats them for display (the cell's value, `display(...)`), by wrapping the shell's
    `display_formatter.format`, which returns what it returned before. pyplot figures are taken from pyplot's
    list, at post_execute before matplotlib's inline backend flushes and closes them when this is registered
    first (at kernel start); registered after it, they are caught as the flush displays them. A figure that fails
    to draw is one finding of kind "error" (a callback that raised would print into the cell's output). `path`
    holds "[]" from the start, so a missing file means the check never ran."""
    findings: list[dict] = []
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
            try:
                found = overflowing_texts(figure)
            except Exception as err:  # reported, never raised: see the docstring
                found = [{"text": f"{type(err).__name__}: {err}", "kind": "error", "axes": None}]
            new += [{"execution_count": count, "figure": index, **finding} for finding in found]
        if new:
            findings.extend(new)
            write_text(path, json.dumps(findings, ensure_ascii=False))

    write_text(path, "[]")
    formatter.format = format
    shell.events.register("pre_execute", pre_execute)
    shell.events.register("post_execute", post_execute)
