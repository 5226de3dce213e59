"""kvlab.plots.prefix: prefilled tokens and time per question."""

from types import SimpleNamespace

from kvlab.plots.prefix import plot_prefix_answers


def test_one_bar_per_question_and_run():
    reuse = [SimpleNamespace(prefilled_tokens=12, first_token_seconds=0.1), SimpleNamespace(prefilled_tokens=9, first_token_seconds=0.2)]
    fresh = [SimpleNamespace(prefilled_tokens=300, first_token_seconds=0.5), SimpleNamespace(prefilled_tokens=297, first_token_seconds=0.6)]
    fig = plot_prefix_answers({"reuse": reuse, "no reuse": fresh})
    tokens_ax, time_ax = fig.axes
    assert [p.get_height() for p in tokens_ax.patches] == [12, 9, 300, 297]
    assert [round(p.get_height()) for p in time_ax.patches] == [100, 200, 500, 600]
    assert [t.get_text() for t in tokens_ax.get_xticklabels()] == ["question 1", "question 2"]
