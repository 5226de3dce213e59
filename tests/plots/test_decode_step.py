from kvlab.measure.decode_step import DecodeStep
from kvlab.measure.timing import Timing
from kvlab.plots.decode_step import plot_decode_steps


def test_bars_are_the_medians_and_the_work_beside_them():
    steps = {
        "dynamic": DecodeStep("dynamic", Timing("dynamic", [0.050, 0.052, 0.051]), 210, 1),
        "static 4096": DecodeStep("static 4096", Timing("static 4096", [0.074, 0.073, 0.076]), 122880, 2),
    }
    fig = plot_decode_steps(steps, title="t")
    time_axis, work_axis = fig.axes[:2]
    assert [round(p.get_height(), 3) for p in time_axis.patches] == [51.0, 74.0]
    assert [p.get_height() for p in work_axis.patches] == [210, 122880]
    assert [t.get_text() for t in time_axis.get_xticklabels()] == ["dynamic", "static 4096"]
    assert [t.get_text() for t in work_axis.texts] == ["210", "122,880"]  # 210 is no visible bar beside 122,880
    assert [t.get_text() for t in time_axis.texts] == ["51.0", "74.0"]


def test_bar_labels_are_written_as_the_reader_writes_numbers():
    from kvlab.i18n import set_language

    steps = {
        "dynamic": DecodeStep("dynamic", Timing("dynamic", [0.0565, 0.0566, 0.0567]), 210, 1),
        "static 4096": DecodeStep("static 4096", Timing("static 4096", [0.074, 0.073, 0.076]), 122880, 2),
    }
    set_language("pt-BR")
    try:
        time_axis, work_axis = plot_decode_steps(steps).axes[:2]
    finally:
        set_language(None)
    assert [t.get_text() for t in work_axis.texts] == ["210", "122.880"]
    assert [t.get_text() for t in time_axis.texts] == ["56,6", "74,0"]
