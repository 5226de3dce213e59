from kvlab.plots.prefill_bars import plot_prefill_bars


def test_one_group_per_request_and_one_bar_per_series():
    series = {"reused": [(19, 0.1), (21, 0.2), (18, 0.1)], "fresh": [(136, 0.5), (170, 0.7), (200, 0.9)]}
    fig = plot_prefill_bars(series, "turn", "time to first token (ms)", "title")
    tokens_ax, time_ax = fig.axes
    assert [t.get_text() for t in tokens_ax.get_xticklabels()] == ["turn 1", "turn 2", "turn 3"]
    assert sorted(p.get_height() for p in tokens_ax.patches) == sorted([19, 21, 18, 136, 170, 200])
    assert max(p.get_height() for p in time_ax.patches) == 900.0  # seconds shown in ms
    assert [t.get_text() for t in tokens_ax.get_legend().get_texts()] == ["reused", "fresh"]
