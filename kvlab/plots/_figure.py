"""Figures that live outside pyplot: nothing global is left open, and Jupyter shows a returned figure once.

A figure made with `plt.subplots` is registered with pyplot, so Jupyter's inline backend displays it at the
end of the cell *and* again as the cell's value. A bare `matplotlib.figure.Figure` is shown only as the value.
"""

from __future__ import annotations

from matplotlib.figure import Figure


def subplots(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (7, 4), **kwargs):
    """(Figure, axes) like `plt.subplots`, without pyplot."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


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
