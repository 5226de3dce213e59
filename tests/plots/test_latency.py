from kvlab.measure.latency import TokenTimes
from kvlab.plots import latency


def test_plot_token_times_skips_the_prefill_and_draws_the_work_and_the_spread():
    run = TokenTimes(
        [5, 6, 7, 8],
        [0.5, 0.1, 0.2, 0.3],
        [1, 2, 3, 4],
        use_cache=False,
        q1=[0.4, 0.09, 0.18, 0.25],
        q3=[0.6, 0.12, 0.22, 0.31],
        tokens_run=[5, 6, 7, 8],
        repeats=3,
    )
    fig = latency.plot_token_times({"no cache": run})
    per_token, work = fig.axes
    assert list(per_token.lines[0].get_xdata()) == [6, 7, 8]
    assert list(per_token.lines[0].get_ydata()) == [100.0, 200.0, 300.0]
    band = per_token.collections[0].get_paths()[0].vertices[:, 1]  # the IQR band, in ms
    assert min(band) == 90.0 and max(band) == 310.0
    assert list(work.lines[0].get_ydata()) == [6, 7, 8]


def test_one_repeat_draws_no_band():
    run = TokenTimes([5, 6], [0.5, 0.1], [1, 2], use_cache=True, tokens_run=[5, 1])
    per_token, _ = latency.plot_token_times({"cache": run}).axes
    assert not per_token.collections


def test_runs_take_series_colours():
    from kvlab.plots.palette import series

    runs = {name: TokenTimes([5, 6], [0.5, 0.1], [1, 2], use_cache=True, tokens_run=[5, 1]) for name in ("a", "b")}
    per_token, work = latency.plot_token_times(runs).axes
    assert [line.get_color() for line in per_token.lines] == [series(0), series(1)]
    assert [line.get_color() for line in work.lines] == [series(0), series(1)]


def test_the_verdicts_are_drawn_under_the_panels():
    run = TokenTimes([5, 6], [0.5, 0.1], [1, 2], use_cache=True, tokens_run=[5, 1])
    fig = latency.plot_token_times({"cache": run}, verdicts=["cache: too noisy to tell: b / a = 1.05 (0.79-1.30)"])
    assert [text.get_text() for text in fig.texts] == ["cache: too noisy to tell: b / a = 1.05 (0.79-1.30)"]
