"""Figures that live outside pyplot: nothing global is left open, and Jupyter shows a returned figure once.

A figure made with `plt.subplots` is registered with pyplot, so Jupyter's inline backend displays it at the
end of the cell *and* again as the cell's value. A bare `matplotlib.figure.Figure` is shown only as the value.

Its tick labels are numbers as kvlab prints them (`kvlab.i18n.number`): 20,000 and 0.25 in English, 20.000 and
0,25 in Portuguese. matplotlib's own default writes 20000 and 0.25 in every language (its `axes.formatter.use_locale`
follows the operating system's locale, which need not be installed, and not `kvlab.set_language`).

A layout made for English labels must hold the longer Portuguese ones: `tight_layout_fitted` wraps a title or
label to the panel it names where it would run past it, and `legend_below` fits a legend's columns to its axes
(`kvlab.plots.overflow` finds what still does not fit).
"""

from __future__ import annotations

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import Formatter, ScalarFormatter
from matplotlib.transforms import ScaledTranslation

from kvlab.i18n import marks, number

MOST_DECIMALS = 6  # ticks finer than 1e-6 apart, or beyond 1e15, fall back to the short "%g" form
LARGEST = 1e15


def tick_decimals(locs) -> int:
    """The fewest decimals that write every tick exactly enough to tell it from its neighbours: 0, 5,000, 10,000
    take 0; 0, 0.25, 0.5 take 2 (not 1, which would print 0.2 for 0.25); 0.1, 0.2 take 1 despite float noise."""
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
    """Tick labels written by `kvlab.i18n.number`, with `tick_decimals` of the ticks shown. The language is read
    when the figure is drawn, so a figure speaks the language in use when it is shown."""

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


def number_ticks(ax) -> None:
    """Give both axes of `ax` a `NumberFormatter` where they still have matplotlib's default one. It stays marked
    as the default, so a category or date axis still gets its own formatter when such data are plotted."""
    for axis in (ax.xaxis, ax.yaxis):
        if type(axis.get_major_formatter()) is ScalarFormatter and axis.isDefault_majfmt:
            axis.set_major_formatter(NumberFormatter())
            axis.isDefault_majfmt = True


def subplots(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (7, 4), **kwargs):
    """(Figure, axes) like `plt.subplots`, without pyplot, with kvlab's number ticks on every axes."""
    fig = Figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols, **kwargs)
    for ax in np.atleast_1d(axes).flat:
        number_ticks(ax)
    return fig, axes


def legend_beside(ax, *args, anchor: float = 1.01, **kwargs):
    """The legend to the right of the axes, outside them: a kvlab figure's legend never covers its data (its
    lines and bars can pass through any corner). `args` and `kwargs` go to `Axes.legend` (handles, fontsize...);
    `anchor` is how far right of the axes, in axes widths, the legend's top-left corner sits."""
    return ax.legend(*args, loc="upper left", bbox_to_anchor=(anchor, 1.0), **kwargs)


def legend_below(ax, handles, gap: float = 0.0, **kwargs):
    """The legend of `handles` under the axes' tick labels and x label, centred on the axes, in as many columns
    as fit their width (one at least), evened out: for a picture whose every cell is data, so that no side of it
    is free for a legend, and whose labels are too long for a column beside it. It covers neither the data nor
    the x label and, no wider than its axes, runs into no neighbour and past no edge of the figure.

    `gap` is the inches between the x label and the legend (its own border pad is there already); `kwargs` go to
    `Axes.legend` (fontsize...). The legend hangs a fixed distance below the axes (the x label's, which does not
    change with the layout), so call this once the axes are laid out (their width sets the columns) and lay the
    figure out again after it: the tight layout then makes room for the legend."""
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


def finish(fig: Figure, axes, title: str | None = None) -> Figure:
    """The last touches every two-panel kvlab figure shares: grid, legend, an optional title, tight layout."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


FIT_ROUNDS = 5  # each round can only add line breaks, so a layout settles in two or three
BALANCE_STEPS = 6  # halvings of the room when evening out a wrapped paragraph's lines: to 1/64 of it


def _span(text: Text, line: str) -> float:
    """How many pixels `line` runs along its reading direction as `text` draws it: across for a title, up for a
    y label."""
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
    """`original` broken at spaces into lines that each span at most `room` pixels as `text` draws them; its own
    line breaks are kept, no word is cut, and `text` keeps the string it had. A paragraph that needs more lines
    gets them of even length (the narrowest room that still takes that many lines), not full lines and a last
    word alone: "em 12 chamadas de decodificação / (sem contar o pré-preenchimento)", not "... (sem contar o /
    pré-preenchimento)"."""
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
    """Each title and axis label of `fig`, with the function of the laid-out figure giving the pixels it may span:
    a title and an x label the width of their axes (centred on them, they then cover no neighbour's), a y label
    their height (it then stays below their title), a figure text (the suptitle) the figure's width."""
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
    """Whether every line of `text` spans at most `room` pixels."""
    current = text.get_text()
    fits = all(_span(text, line) <= room for line in current.split("\n"))
    text.set_text(current)
    return fits


def _fit(fig: Figure, rect, texts: list[tuple[Text, object]], originals: list[str]) -> None:
    """Lay `fig` out with each of `texts` wrapped from its original to the room the layout leaves it: the first
    layout is made without them (the most room they can have), then each round wraps them to the room the last
    layout left and lays out again, the room only ever shrinking, until no text breaks anew."""
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
    """The pixels of height the wrapping added above and below one row of panels: the most any axes' title and
    x label gained together, plus what the figure's own texts (the suptitle) gained."""

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


def tight_layout_fitted(fig: Figure, rect: tuple[float, float, float, float] = (0, 0, 1, 1), grow: bool = False):
    """`fig.tight_layout(rect=rect)`, with every title and axis label that would not fit broken into lines (see
    `_fitted_texts` for how far each may run). tight_layout pads panels apart by their texts but cannot shrink a
    text: a Portuguese title wider than its panel runs into the next one's, a y label taller than its axes into
    their title. A text that fits is left as it is, so a layout that worked is the plain tight_layout's.

    With `grow`, for a figure of one row of panels, the figure grows by the height the new lines take, so its
    panels keep the height they have when every text fits on its line (in English, say) rather than shrinking
    under a three-line title; the strips `rect` leaves free keep their height in inches. Returns `fig`."""
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
