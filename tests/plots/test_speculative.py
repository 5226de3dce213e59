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
