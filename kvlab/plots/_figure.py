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
