"""Figures that live outside pyplot: nothing global is left open, and Jupyter shows a returned figure once.

A figure made with `plt.subplots` is registered with pyplot, so Jupyter's inline backend displays it at the
end of the cell *and* again as the cell's value. A bare `matplotlib.figure.Figure` is shown only as the value.

Its tick labels are numbers as kvlab prints them (`kvlab.i18n.number`): 20,000 and 0.25 in English, 20.000 and
0,25 in Portuguese. matplotlib's own default writes 20000 and 0.25 in every language (its `axes.formatter.use_locale`
follows the operating system's locale, which need not be installed, and not `kvlab.set_language`).
"""

from __future__ import annotations

import numpy as np
from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, ScalarFormatter

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


def finish(fig: Figure, axes, title: str | None = None) -> Figure:
    """The last touches every two-panel kvlab figure shares: grid, legend, an optional title, tight layout."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
