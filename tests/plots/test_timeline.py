from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

from kvlab.plots import timeline
from kvlab.plots.palette import CROPPED, MASKED


def test_plot_timeline_marks_prefetches_and_offloads(traces):
    trace = traces["offloaded"]
    fig = timeline.plot_timeline(trace, steps=(1, 2))
    labels = {
        c.get_label(): len(c.get_offsets())
        for c in fig.axes[0].collections
        if c.get_label() in ("prefetch", "offload", "update")
    }
    moves = [e for e in trace.transfers if 1 <= e["step"] <= 2]
    assert labels["offload"] == sum(e["direction"] == "offload" for e in moves)
    assert labels["prefetch"] == sum(e["direction"] == "prefetch" for e in moves)
    assert labels["update"] == 2 * 3


def test_the_legend_sits_outside_the_axes_and_uses_no_state_colour(traces):
    """The last prefetch of a step (layer 0, top right) is the event the notebook explains: nothing may cover it."""
    fig = timeline.plot_timeline(traces["offloaded"], steps=(1, 2))
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
    colours = {to_hex(c.get_facecolor()[0]) for c in ax.collections if len(c.get_offsets())}
    assert not colours & {CROPPED, MASKED}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "resident (never offloaded)" not in labels  # every layer of tiny-llama is offloaded: nothing drawn so
