from kvlab.measure.latency import TokenTimes
from kvlab.plots import latency


def test_plot_token_times_skips_the_prefill_and_accumulates():
    run = TokenTimes([5, 6, 7, 8], [0.5, 0.1, 0.2, 0.3], [1, 2, 3, 4], use_cache=False)
    fig = latency.plot_token_times({"no cache": run})
    per_token, total = fig.axes
    assert list(per_token.lines[0].get_xdata()) == [6, 7, 8]
    assert list(total.lines[0].get_ydata()) == [0.5, 0.6, 0.8, 1.1]
