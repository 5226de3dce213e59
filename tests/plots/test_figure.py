"""`kvlab.plots._figure`: figures outside pyplot, the one way a kvlab legend is placed (beside the axes) and the
way under a picture with no free side; titles and labels wrapped to the panel they name; the one way the explorer
and `kvlab.live` turn a figure into an image widget's bytes (`png_bytes`). Figures only: < 1 s."""

from __future__ import annotations

import io

import matplotlib
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread
from matplotlib.patches import Patch

from kvlab.plots._figure import legend_below, legend_beside, png_bytes, subplots, tight_layout_fitted, wrap_to
from tools.figure_check import overflowing_texts

LONG = "em 12 chamadas de decodificação (sem contar o pré-preenchimento)"


def test_the_legend_sits_right_of_the_axes_and_passes_its_arguments_on():
    fig, ax = subplots()
    ax.plot([0, 1], [0, 1], label="line")
    legend = legend_beside(ax, fontsize=7, frameon=False)
    fig.canvas.draw()
    box, axes_box = legend.get_window_extent(), ax.get_window_extent()
    assert box.x0 >= axes_box.x1  # outside: over no data
    assert legend.get_texts()[0].get_fontsize() == 7 and not legend.get_frame_on()
    assert ax.get_legend() is legend


def test_a_wrapped_paragraph_gets_lines_of_even_length_not_a_last_word_alone():
    fig, ax = subplots(figsize=(5, 3))
    title = ax.set_title(LONG, fontsize=10)
    full = title.get_window_extent().width
    wrapped = wrap_to(title, "first line\n" + LONG, 0.8 * full)  # greedy: "... (sem contar o" / "pré-preenchimento)"
    assert wrapped == "first line\nem 12 chamadas de decodificação\n(sem contar o pré-preenchimento)"
    assert title.get_text() == LONG  # measuring leaves the text as it was
    assert wrap_to(title, "pré-preenchimento", 1.0) == "pré-preenchimento"  # a word is never cut


def test_texts_that_fit_are_laid_out_as_by_tight_layout():
    def figure(layout):
        fig, (left, right) = subplots(1, 2, figsize=(8, 3))
        left.set_title("left")
        right.set_ylabel("a short label")
        fig.suptitle("a suptitle")
        layout(fig)
        return fig

    fitted, plain = figure(tight_layout_fitted), figure(lambda fig: fig.tight_layout())
    assert [ax.get_position().bounds for ax in fitted.axes] == [ax.get_position().bounds for ax in plain.axes]
    assert fitted.axes[1].get_ylabel() == "a short label"


def test_a_title_wider_than_its_panel_and_a_label_taller_than_its_axes_are_wrapped_to_them():
    fig, (left, right) = subplots(1, 2, figsize=(8, 3))
    short = subplots(1, 2, figsize=(8, 3))[0]
    short.axes[0].set_title("dynamic: 12 chamadas", fontsize=10)
    tight_layout_fitted(short)
    left.set_title("dynamic: " + LONG, fontsize=10)
    right.set_title("static: " + LONG, fontsize=10)
    left.set_ylabel("comprimento da sequência das chaves do cache, muito longo")
    assert len(overflowing_texts(fig)) > 0  # the two titles run into each other
    tight_layout_fitted(fig, grow=True)
    assert overflowing_texts(fig) == []
    assert left.get_title().split() == ("dynamic: " + LONG).split() and "\n" in left.get_title()
    assert left.yaxis.label.get_window_extent().height <= left.get_window_extent().height
    width, height = fig.get_size_inches()
    assert width == 8 and height > 3  # grown by the title's new lines...
    panel, unwrapped = left.get_window_extent().height, short.axes[0].get_window_extent().height
    assert panel == pytest.approx(unwrapped, abs=0.05 * fig.dpi)  # ...so the panel keeps its height (one-line title)


def test_a_legend_below_hangs_under_the_x_label_in_even_columns_no_wider_than_its_axes():
    fig, ax = subplots(figsize=(6, 2.5))
    ax.set_xlabel("token position")
    fig.tight_layout()
    labels = ["held, not attended (recorded past)", "held and attended by the next token", "a", "b"]
    legend = legend_below(ax, [Patch(label=label) for label in labels], fontsize="small", frameon=False)
    fig.tight_layout()
    assert overflowing_texts(fig) == []  # drawn: the label's extent is where the layout put it
    columns = {round(text.get_window_extent().x0) for text in legend.get_texts()}
    assert ax.get_legend() is legend and len(columns) == 2  # 2 x 2: three columns would not fit, nor leave 3 + 1
    assert legend.get_window_extent().y1 <= ax.xaxis.label.get_window_extent().y0
    assert legend.get_window_extent().width <= ax.get_window_extent().width


def test_localise_ticks_gives_any_axes_the_readers_marks_and_leaves_a_chosen_formatter():
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    from kvlab.i18n import set_language
    from kvlab.plots._figure import NumberFormatter, localise_ticks

    with plt.ioff():
        fig, (ax, other) = plt.subplots(1, 2)
    plt.close(fig)
    inset = ax.inset_axes([0.5, 0.5, 0.4, 0.4])
    other.yaxis.set_major_formatter(PercentFormatter())
    assert localise_ticks(ax, other) == (ax, other) and localise_ticks(inset) is inset
    assert isinstance(ax.xaxis.get_major_formatter(), NumberFormatter)
    assert isinstance(inset.yaxis.get_major_formatter(), NumberFormatter)
    assert isinstance(other.yaxis.get_major_formatter(), PercentFormatter)  # chosen on purpose: kept
    inset.plot([0, 0.5], [0, 1500])
    set_language("pt-BR")
    try:
        fig.draw_without_rendering()
        assert "0,5" in [label.get_text() for label in inset.get_xticklabels()]
        assert "1.500" in [label.get_text() for label in inset.get_yticklabels()]
    finally:
        set_language(None)


def test_the_png_paints_its_own_opaque_white_background_whatever_the_style_and_the_figure():
    """JupyterLab's dark theme shows a transparent PNG's black text on black: the image carries its own white."""
    dark = {"figure.facecolor": "#111111", "savefig.facecolor": "none", "savefig.transparent": True}
    with matplotlib.rc_context(dark):
        fig = Figure(figsize=(2, 1), facecolor="#222222")
        fig.add_subplot().plot([0, 1], [1, 0])
        png = png_bytes(fig, dpi=50)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(io.BytesIO(png))  # (height, width, RGBA) floats
    assert pixels.shape == (50, 100, 4)  # 2 x 1 inches at 50 dpi
    assert (pixels[..., 3] == 1.0).all()  # opaque everywhere
    assert pixels[0, 0].tolist() == [1.0, 1.0, 1.0, 1.0] and pixels[-1, -1].tolist() == [1.0, 1.0, 1.0, 1.0]
