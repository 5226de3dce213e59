"""kvlab.plots.forward_inputs: input lengths per forward call."""

import pytest

from kvlab.i18n import _, set_language
from kvlab.measure.devices import ForwardInput, ForwardLog
from kvlab.plots.forward_inputs import plot_forward_shapes
from tools.figure_check import overflowing_texts


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


def test_inputs_of_the_same_lengths_are_drawn_side_by_side_not_hidden():
    """Notebook 09: input_ids and position_ids have the same length at every call; drawn at the same points, one hid
    the other. They are shifted apart sideways, by the same amount at every call, their lengths unchanged."""
    dynamic, static = _notebook_09_logs(4)
    fig = plot_forward_shapes({"dynamic": dynamic, "static": static})
    for ax in fig.axes:
        lines = {line.get_label(): line for line in ax.lines}
        ids, positions = lines["input_ids"], lines["position_ids"]
        assert list(ids.get_ydata()) == list(positions.get_ydata()) == [7, 1, 1, 1]
        shifts = [p - i for i, p in zip(ids.get_xdata(), positions.get_xdata())]
        assert max(shifts) - min(shifts) < 1e-9 and min(shifts) > 0.1  # apart by the same amount at every call
        assert [round(x) for x in ids.get_xdata()] == [0, 1, 2, 3]  # still at their calls
    static_lines = {line.get_label(): line for line in fig.axes[1].lines}
    assert list(static_lines["attention_mask"].get_xdata()) != list(static_lines["cache.layers[0].keys"].get_xdata())


def _notebook_09_logs(new_tokens: int) -> tuple[ForwardLog, ForwardLog]:
    """The inputs notebook 09 logs for a 7-token prompt: the default cache's keys grow, the static cache's keys and
    its 4-D mask keep 19 slots."""
    dynamic, static = [], []
    for call in range(new_tokens):
        fed = 7 if call == 0 else 1
        for log in (dynamic, static):
            log += [ForwardInput(call, name, "cpu", "int64", (1, fed)) for name in ("input_ids", "position_ids")]
        if call:
            dynamic.append(ForwardInput(call, "cache.layers[0].keys", "cpu", "float32", (1, 3, 6 + call, 64)))
            static.append(ForwardInput(call, "cache.layers[0].keys", "cpu", "float32", (1, 3, 19, 64)))
            static.append(ForwardInput(call, "attention_mask", "cpu", "bool", (1, 1, 1, 19)))
    return ForwardLog(dynamic), ForwardLog(static)


@pytest.mark.parametrize(
    ("language", "title", "live_title"),
    [
        ("en", "Sequence length of each forward input, per call", "8 new tokens after a 7-token prompt"),
        (  # notebooks/pt-BR/09's
            "pt-BR",
            "Comprimento da sequência de cada entrada do forward, por chamada",
            "8 tokens novos depois de um prompt de 7 tokens",
        ),
    ],
)
def test_the_notebooks_long_titles_fit_their_panels_in_both_languages(language, title, live_title):
    """Notebook 09's two panels and its one-panel live control: the Portuguese titles ("... em 12 chamadas de
    decodificação (sem contar o pré-preenchimento)") are wider than a panel, and were printed over each other."""
    set_language(language)
    try:
        dynamic, static = _notebook_09_logs(13)
        both = plot_forward_shapes(
            {"dynamic (default)": dynamic, 'cache_implementation="static"': static},
            title=title,
        )
        live = plot_forward_shapes({'cache_implementation="static"': _notebook_09_logs(8)[1]}, title=live_title)
        assert overflowing_texts(both) == [] and overflowing_texts(live) == []
        drawn = both.axes[1].get_title()
        expected = _("{label}: {distinct} distinct signature\nover {calls} decoding calls (prefill not counted)")
        expected = expected.format(label='cache_implementation="static"', distinct=1, calls=12)
        assert drawn.split() == expected.split()  # the same words, broken into lines where the panel ends
        assert (drawn == expected) == (language == "en")  # English fits as it is written
        legend_top = both.legends[0].get_window_extent().y1
        assert all(legend_top <= ax.get_tightbbox().y0 + 1 for ax in both.axes)  # under the x labels still
    finally:
        set_language(None)
