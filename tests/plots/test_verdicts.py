from matplotlib.figure import Figure

from kvlab.plots.verdicts import add_verdicts


def test_verdicts_go_in_one_box_under_the_panels_and_the_figure_grows():
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    add_verdicts(fig, ["a is 2.00x slower than b (1.90-2.10)", "", "too noisy to tell: c / d = 1.05 (0.79-1.30)"])
    assert tuple(fig.get_size_inches())[0] == 6 and fig.get_size_inches()[1] > 3
    (text,) = fig.texts
    assert text.get_text() == "a is 2.00x slower than b (1.90-2.10)\ntoo noisy to tell: c / d = 1.05 (0.79-1.30)"
    renderer = fig.canvas.get_renderer() if hasattr(fig.canvas, "get_renderer") else fig._get_renderer()
    assert text.get_window_extent(renderer).y1 < ax.get_tightbbox(renderer).y0  # under the panel, not over it


def test_no_verdict_leaves_the_figure_as_it_was():
    fig = Figure(figsize=(6, 3))
    fig.subplots()
    add_verdicts(fig, [])
    assert not fig.texts and tuple(fig.get_size_inches()) == (6, 3)


def test_a_mapping_of_verdicts_is_drawn_as_what_was_compared_then_the_verdict():
    fig = Figure(figsize=(6, 3))
    fig.subplots()
    add_verdicts(fig, {"no cache": "slower", "DynamicCache": "no difference"})
    assert fig.texts[0].get_text() == "no cache: slower\nDynamicCache: no difference"
