"""`kvlab.plots._figure`: figures outside pyplot, and the one way a kvlab legend is placed (beside the axes)."""

from __future__ import annotations

from kvlab.plots._figure import legend_beside, subplots


def test_the_legend_sits_right_of_the_axes_and_passes_its_arguments_on():
    fig, ax = subplots()
    ax.plot([0, 1], [0, 1], label="line")
    legend = legend_beside(ax, fontsize=7, frameon=False)
    fig.canvas.draw()
    box, axes_box = legend.get_window_extent(), ax.get_window_extent()
    assert box.x0 >= axes_box.x1  # outside: over no data
    assert legend.get_texts()[0].get_fontsize() == 7 and not legend.get_frame_on()
    assert ax.get_legend() is legend
