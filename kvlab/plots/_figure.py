"""Figures outside pyplot (Jupyter shows a returned figure once, not again at the cell's end), with tick labels
written as kvlab prints numbers in the language in use, and titles and labels wrapped to the panel they name, so
that a layout made for English holds the longer Portuguese (`tools.figure_check` finds what still does not fit).

A figure as PNG bytes (`png_bytes`) is what an `ipywidgets.Image` shows, in the Cache Explorer and in `kvlab.live`
controls: here, in plots, so both draw their frames the one way without one importing the other (ARCHITECTURE.md's
flow). The background is opaque white: black text on it reads the same on a light or a dark page.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import Formatter, ScalarFormatter
from matplotlib.transforms import ScaledTranslation

from kvlab.i18n import marks, number
from kvlab.plots.palette import series

# The gid of a text that shows the model's data (a token, generated text), not a label: it stays in the language the
# model read, and `tools.figure_check.visible_texts` lists it apart, so no language check reads it as a label.
DATA_TEXT = "kvlab-data"
MOST_DECIMALS = 6  # ticks finer than 1e-6 apart, or beyond 1e15, fall back to the short "%g" form
LARGEST = 1e15
FACE = "#ffffff"  # the opaque background of every `png_bytes` frame


def tick_decimals(locs) -> int:
    """The fewest decimals that tell every tick from its neighbours: 0, 0.25, 0.5 take 2 (1 would print 0.2 for
    0.25); 0.1, 0.2 take 1 despite float noise."""
    values = np.unique(np.asarray(locs, dtype=float))
    values = values[np.isfinite(values)]
    if values.size == 0:
        return 0
    steps = np.diff(values)
    step = float(steps.min()) if steps.size else (abs(float(values[0])) or 1.0)
    for decimals in range(MOST_DECIMALS + 1):
        if np.all(np.abs(values - np.round(values, decimals)) <= step * 1e-3):
            return decimals
    return MOST_DECIMALS


class NumberFormatter(Formatter):
    """Tick labels written by `kvlab.i18n.number`, in the language in use when the figure is drawn (matplotlib's
    own follows the operating system's locale, not `kvlab.set_language`)."""

    decimals = 0

    def set_locs(self, locs):
        super().set_locs(locs)
        self.decimals = tick_decimals(self.locs)

    def __call__(self, value, pos=None) -> str:
        if not np.isfinite(value):
            return ""
        if abs(value) >= LARGEST or self.decimals >= MOST_DECIMALS:
            text = marks(f"{value:g}")
        else:
            text = number(0.0 if round(value, self.decimals) == 0 else value, self.decimals)
        return text.replace("-", "\N{MINUS SIGN}") if rcParams["axes.unicode_minus"] else text


def localise_ticks(*axes):
    """Every numeric axis of `axes` (Axes, or arrays of them) that still has matplotlib's default formatter gets a
    `NumberFormatter`: "0,5" and "1.000" in pt-BR, as kvlab prints numbers. An axes made outside `subplots` (pyplot's,
    an inset, a learner's own) needs this call. Returns `axes` as given."""
    for ax in (ax for each in axes for ax in np.atleast_1d(each).flat):
        for axis in (ax.xaxis, ax.yaxis):
            if type(axis.get_major_formatter()) is ScalarFormatter and axis.isDefault_majfmt:
                axis.set_major_formatter(NumberFormatter())
                axis.isDefault_majfmt = True  # still the default: a category or date axis gets its own formatter
    return axes[0] if len(axes) == 1 else axes


def subplots(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (7, 4), **kwargs):
    """(Figure, axes) like `plt.subplots`, without pyplot, with kvlab's number ticks (`localise_ticks`)."""
    fig = Figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols, **kwargs)
    localise_ticks(axes)
    return fig, axes


def legend_beside(ax, *args, anchor: float = 1.01, **kwargs):
    """The legend right of the axes, outside them, so it never covers data; `anchor`: axes widths from the left
    edge to the legend's top-left corner."""
    return ax.legend(*args, loc="upper left", bbox_to_anchor=(anchor, 1.0), **kwargs)


def legend_below(ax, handles, gap: float = 0.0, **kwargs):
    """The legend of `handles` under the x label, centred, in as many even columns as fit the axes' width: for a
    picture with no free side whose labels are too long to go beside it. `gap`: inches below the x label.
    Call it once the axes are laid out (their width sets the columns), and lay the figure out again after it."""
    fig = ax.get_figure(root=True)
    below = ax.get_window_extent().y0 - ax.get_tightbbox().y0  # pixels the tick labels and x label take
    hanging = ax.transAxes + ScaledTranslation(0, -(below / fig.dpi + gap), fig.dpi_scale_trans)

    def legend(ncol):
        return ax.legend(
            handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=hanging, ncol=ncol, **kwargs
        )

    ncol = len(handles)
    while ncol > 1 and legend(ncol).get_window_extent().width > ax.get_window_extent().width:
        ncol -= 1
    rows = -(-len(handles) // ncol)
    return legend(-(-len(handles) // rows))  # as few columns as take those rows: 4 entries in 2 by 2, not 3 + 1


def dodged(groups: int, index: int, at) -> tuple[np.ndarray, float]:
    """Where the `index`-th of `groups` bars side by side at each position of `at` goes, and its width: the groups
    share 0.8 of the unit between positions."""
    width = 0.8 / max(groups, 1)
    return np.asarray(at, dtype=float) + (index - (groups - 1) / 2) * width, width


def grouped_bars(ax, groups: dict, shown=number, colour=series) -> None:
    """A bar per value of each of `groups` ({label: values}, at 0, 1, 2...), side by side (`dodged`), the `index`-th
    group in `colour(index)`, each bar labelled with `shown(value)`: a prefill of 19 beside one of 170 is read, not
    guessed."""
    for index, (label, values) in enumerate(groups.items()):
        x, width = dodged(len(groups), index, range(len(values)))
        bars = ax.bar(x, values, width, label=label, color=colour(index))
        ax.bar_label(bars, labels=[shown(value) for value in values], fontsize=7)


def finish(fig: Figure, panels, title: str | None = None) -> Figure:
    """Each panel's (axes, x label, y label, title), y from 0, grid and legend; an optional suptitle; tight layout."""
    for ax, xlabel, ylabel, panel_title in panels:
        ax.set(xlabel=xlabel, ylabel=ylabel, title=panel_title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def finish_beside(fig: Figure, ax, title: str, xlabel: str = "", ylabel: str = "") -> Figure:
    """One panel's title and labels, its legend beside it, outside the data a stack, bars or a saw fill, and the
    figure laid out with every text fitted, taller by any line a wrapped text gains (`tight_layout_fitted`)."""
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    legend_beside(ax, fontsize=8)
    return tight_layout_fitted(fig, grow=True)


FIT_ROUNDS = 5  # each round can only add line breaks, so a layout settles in two or three
BALANCE_STEPS = 6  # halvings of the room when evening out a wrapped paragraph's lines: to 1/64 of it


def _span(text: Text, line: str) -> float:
    """Pixels `line` runs along its reading direction as `text` draws it (up for a y label)."""
    text.set_text(line)
    box = text.get_window_extent()
    return box.height if round(text.get_rotation()) % 180 == 90 else box.width


def _greedy(text: Text, words: list[str], room: float) -> list[str]:
    """`words` as lines of as many words as fit in `room` pixels; a word wider than `room` has a line to itself."""
    lines = [words[0]]
    for word in words[1:]:
        if _span(text, f"{lines[-1]} {word}") > room:
            lines.append(word)
        else:
            lines[-1] = f"{lines[-1]} {word}"
    return lines


def wrap_to(text: Text, original: str, room: float) -> str:
    """`original` broken at spaces into lines of at most `room` pixels as `text` draws them (its own breaks kept,
    no word cut, `text` left as it was). A paragraph needing more lines gets them of even length (the narrowest
    room that takes as many lines), not full lines and a last word alone."""
    current, lines = text.get_text(), []
    for paragraph in original.split("\n"):
        words = paragraph.split(" ")
        greedy = _greedy(text, words, room)
        if len(greedy) > 1:
            low, high = 0.0, room
            for _ in range(BALANCE_STEPS):
                middle = (low + high) / 2
                low, high = (low, middle) if len(_greedy(text, words, middle)) == len(greedy) else (middle, high)
            greedy = _greedy(text, words, high)
        lines += greedy
    text.set_text(current)
    return "\n".join(lines)


def _fitted_texts(fig: Figure) -> list[tuple[Text, object]]:
    """Each title and axis label of `fig`, with a function giving the pixels it may span once laid out: a title
    and an x label their axes' width (then they cover no neighbour's), a y label their height (then it stays
    below their title), a figure text (the suptitle) the figure's width."""
    texts = []
    for ax in fig.axes:
        texts += [
            (ax.title, lambda ax=ax: ax.get_window_extent().width),
            (ax.xaxis.label, lambda ax=ax: ax.get_window_extent().width),
            (ax.yaxis.label, lambda ax=ax: ax.get_window_extent().height),
        ]
    texts += [(text, lambda: fig.bbox.width) for text in fig.texts]
    return [(text, room) for text, room in texts if text.get_text()]


def _fits(text: Text, room: float) -> bool:
    current = text.get_text()
    fits = all(_span(text, line) <= room for line in current.split("\n"))
    text.set_text(current)
    return fits


def _fit(fig: Figure, rect, texts: list[tuple[Text, object]], originals: list[str]) -> None:
    """Lay `fig` out with `texts` wrapped to the room the layout leaves them: first laid out without them (the most
    room), then each round wraps them to the last layout's room (only ever shrinking) until no text breaks anew."""
    for text, _room in texts:
        text.set_text("")
    fig.tight_layout(rect=rect)
    rooms = [room() for _text, room in texts]
    wrapped = None
    for _ in range(FIT_ROUNDS):
        fitting = [wrap_to(text, original, room) for (text, _), original, room in zip(texts, originals, rooms)]
        for (text, _room), line in zip(texts, fitting):
            text.set_text(line)
        if fitting == wrapped:
            return  # laid out with these very lines already
        fig.tight_layout(rect=rect)
        wrapped = fitting
        rooms = [min(before, room()) for before, (_text, room) in zip(rooms, texts)]


def _added_height(fig: Figure, texts: list[tuple[Text, object]], originals: list[str]) -> float:
    """Pixels of height the wrapping added to one row of panels: the most any axes' title and x label gained
    together, plus what the figure's own texts gained."""

    def gained(text: Text, original: str) -> float:
        wrapped = text.get_text()
        if round(text.get_rotation()) % 180 == 90 or wrapped == original:
            return 0.0
        tall = text.get_window_extent().height
        text.set_text(original)
        one = text.get_window_extent().height
        text.set_text(wrapped)
        return tall - one

    gains = {id(text): gained(text, original) for (text, _room), original in zip(texts, originals)}
    panels = [gains.get(id(ax.title), 0.0) + gains.get(id(ax.xaxis.label), 0.0) for ax in fig.axes]
    return max(panels, default=0.0) + sum(gains.get(id(text), 0.0) for text in fig.texts)


def tight_layout_fitted(
    fig: Figure, rect: tuple[float, float, float, float] = (0, 0, 1, 1), grow: bool = False, title: str | None = None
):
    """`fig.tight_layout(rect=rect)`, with every title and axis label that would not fit (`_fitted_texts`) broken
    into lines: tight_layout cannot shrink a text, so a Portuguese title runs into the next panel's. A layout
    where every text fits is the plain tight_layout's. With `grow` (one row of panels), the figure grows by the
    new lines' height, so its panels keep their height; the strips `rect` leaves free keep theirs in inches.
    A `title` becomes the figure's suptitle first. Returns `fig`."""
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=rect)
    texts = _fitted_texts(fig)
    if all(_fits(text, room()) for text, room in texts):
        return fig
    originals = [text.get_text() for text, _room in texts]
    _fit(fig, rect, texts, originals)
    added = _added_height(fig, texts, originals) if grow else 0.0
    if added > 0:
        width, height = fig.get_size_inches()
        taller = height + added / fig.dpi
        fig.set_size_inches(width, taller)  # as wide: every line still fits its panel
        left, bottom, right, top = rect  # the strips rect keeps free (a legend's) keep their inches
        fig.tight_layout(rect=(left, bottom * height / taller, right, 1 - (1 - top) * height / taller))
    return fig


def png_bytes(fig: Figure, dpi: int = 80) -> bytes:
    """`fig` rendered to PNG at `dpi`, on the opaque `FACE` background whatever the figure's own facecolor."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor=FACE, transparent=False)
    return buffer.getvalue()
