"""kvlab.plots.speculative: accepted/rejected bars and cache lengths per step."""

from kvlab.measure.rollback import SpeculativeResult, SpeculativeStep
from kvlab.plots.speculative import plot_speculative_steps


def test_bars_stack_accepted_under_rejected_and_lines_follow_the_crop():
    steps = [SpeculativeStep((1, 2, 3), 1, 2, 13, 11), SpeculativeStep((4, 5, 6), 3, 0, 15, 15)]
    fig = plot_speculative_steps(SpeculativeResult([1, 2], steps))
    bars, lengths = fig.axes
    assert [p.get_height() for p in bars.patches] == [1, 3, 2, 0]
    assert [p.get_y() for p in bars.patches] == [0, 0, 1, 3]
    assert [list(line.get_ydata()) for line in lengths.lines] == [[13, 15], [11, 15]]
    assert [t.get_text() for t in bars.get_xticklabels()] == ["2", "3"]  # forward 1 is the prefill


def test_a_forward_without_a_draft_is_drawn_and_named():
    steps = [SpeculativeStep((), 0, 0, 10, 10), SpeculativeStep((4, 5), 2, 0, 13, 13)]
    fig = plot_speculative_steps(SpeculativeResult([1, 2, 3, 4], steps, forwards=3))
    bars, lengths = fig.axes
    assert [t.get_text() for t in bars.texts] == ["no draft"]
    assert len(lengths.lines[0].get_xdata()) == 2  # every forward after the prefill is on the line
    fig.canvas.draw()
    assert bars.get_legend().get_window_extent().x0 >= bars.get_window_extent().x1  # the legend covers no bar
