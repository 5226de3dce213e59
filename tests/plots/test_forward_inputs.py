"""kvlab.plots.forward_inputs: input lengths per forward call."""

from kvlab.measure.devices import ForwardInput, ForwardLog
from kvlab.plots.forward_inputs import plot_forward_shapes


def test_one_line_per_input_with_its_sequence_length():
    log = ForwardLog(
        [
            ForwardInput(0, "input_ids", "cpu", "int64", (1, 5)),
            ForwardInput(1, "input_ids", "cpu", "int64", (1, 1)),
            ForwardInput(1, "cache.layers[0].keys", "cpu", "float32", (1, 3, 5, 64)),
            ForwardInput(2, "input_ids", "cpu", "int64", (1, 1)),
            ForwardInput(2, "cache.layers[0].keys", "cpu", "float32", (1, 3, 6, 64)),
        ]
    )
    fig = plot_forward_shapes({"dynamic": log})
    ax = fig.axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines}
    assert lines == {"cache.layers[0].keys": ([1, 2], [5, 6]), "input_ids": ([0, 1, 2], [5, 1, 1])}
    assert ax.get_title() == "dynamic: 2 distinct signatures\nover 2 decoding calls (prefill not counted)"
    assert log.distinct_signatures() == 3  # the prefill is a signature of its own


def test_one_decoding_signature_is_singular_in_the_title():
    log = ForwardLog([ForwardInput(c, "input_ids", "cpu", "int64", (1, 5 if c == 0 else 1)) for c in range(4)])
    assert log.decoding_signatures() == (1, 3)
    assert plot_forward_shapes({"static": log}).axes[0].get_title().startswith("static: 1 distinct signature\n")


def test_an_input_keeps_its_colour_across_panels_and_the_legend_covers_no_panel():
    dynamic = ForwardLog([ForwardInput(c, "input_ids", "cpu", "int64", (1, 5 if c == 0 else 1)) for c in range(3)])
    static = ForwardLog(
        [ForwardInput(c, "attention_mask", "cpu", "bool", (1, 1, 1, 9)) for c in range(1, 3)]
        + [ForwardInput(c, "input_ids", "cpu", "int64", (1, 5 if c == 0 else 1)) for c in range(3)]
    )
    fig = plot_forward_shapes({"dynamic": dynamic, "static": static})
    colour = [{line.get_label(): line.get_color() for line in ax.lines} for ax in fig.axes]
    assert colour[0]["input_ids"] == colour[1]["input_ids"] != colour[1]["attention_mask"]
    assert all(ax.get_legend() is None for ax in fig.axes)  # one legend for the figure, under the panels
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["attention_mask", "input_ids"]
    fig.canvas.draw()
    legend_top = legend.get_window_extent().y1
    assert all(legend_top <= ax.get_window_extent().y0 for ax in fig.axes)
