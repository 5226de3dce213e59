"""`tools.figure_check`: a text cut off at the figure's edge or printed over another panel's title is found, and
a laid-out kvlab figure (its legend beside the axes) is clean in both languages. Figures only, no model: < 1 s."""

from __future__ import annotations

import pytest

from kvlab.i18n import LANGUAGES, _, set_language
from kvlab.plots._figure import legend_beside, subplots
from kvlab.plots.kv_bytes import plot_bytes
from tools.figure_check import overflowing_texts


def test_a_title_wider_than_the_figure_is_outside_even_after_tight_layout():
    fig, ax = subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    title = "a title far too long for a four-inch figure, " * 2
    ax.set_title(title)
    fig.tight_layout()  # cannot help: the title is wider than the whole canvas
    assert overflowing_texts(fig) == [{"text": title, "kind": "outside", "axes": 0}]


def test_two_subplot_titles_running_into_each_other_are_one_overlap():
    fig, (left, right) = subplots(1, 2, figsize=(8, 3))
    left.set_title("the left panel's title, which runs on and on and on")
    right.set_title("the right panel's title, which runs on and on too")
    found = overflowing_texts(fig)
    assert found == [
        {
            "text": "the left panel's title, which runs on and on and on",
            "kind": "overlap",
            "axes": 0,
            "with": "the right panel's title, which runs on and on too",
        }
    ]
    left.set_title("left")
    assert overflowing_texts(fig) == []  # a short title: nothing is covered, each title is inside the canvas


def test_a_y_label_taller_than_its_axes_runs_into_their_own_wide_title():
    fig, ax = subplots(figsize=(4, 3))
    fig.subplots_adjust(left=0.2, right=0.8)
    ax.set_title("a title nearly as wide as the whole figure")
    ax.set_ylabel("the y label, taller than its own axes are")
    assert overflowing_texts(fig) == [
        {
            "text": "the y label, taller than its own axes are",
            "kind": "overlap",
            "axes": 0,
            "with": "a title nearly as wide as the whole figure",
        }
    ]
    ax.set_ylabel("a short y label")
    assert overflowing_texts(fig) == []


def test_a_clipped_annotation_is_outside_and_a_text_that_is_not_drawn_is_not_checked():
    fig, ax = subplots(figsize=(6, 3))
    fig.subplots_adjust(right=0.5)  # room right of the axes, inside the canvas
    ax.set_xlim(0, 1)
    ax.annotate("clipped at the axes' edge", (0.9, 0.5), clip_on=True)
    ax.annotate("free to run past it", (0.9, 0.2))  # outside the axes, inside the canvas: fine
    hidden = ax.text(5, 0.5, "far right, but hidden")
    hidden.set_visible(False)
    ax.set_yticks([0.5], ["a y tick label that would run off the canvas's left edge"])
    ax.yaxis.set_visible(False)  # so its tick labels are not drawn
    assert overflowing_texts(fig) == [{"text": "clipped at the axes' edge", "kind": "outside", "axes": 0}]
    ax.yaxis.set_visible(True)
    assert {found["text"] for found in overflowing_texts(fig)} == {
        "clipped at the axes' edge",
        "a y tick label that would run off the canvas's left edge",
    }


def test_a_legend_beside_the_axes_fits_once_laid_out():
    """Outside the axes is fine: what counts is the canvas, which tight_layout makes room in."""
    fig, ax = subplots(figsize=(5, 3))
    ax.plot([0, 1], [0, 1], label="first line")
    ax.plot([0, 1], [1, 0], label="second line")
    legend = legend_beside(ax)
    fig.tight_layout()
    assert overflowing_texts(fig) == []
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # it is beside the axes, not over them


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_a_kvlab_plot_with_its_legend_beside_is_clean_in_both_languages(language):
    set_language(language)
    try:
        fig = plot_bytes(
            {"SmolLM2": {"4k": 2**27, "32k": 2**30}, "Llama 3 8B": {"4k": 2**29, "32k": 2**32}},
            marked={("SmolLM2", "32k")},
            marked_label=_("past the model's context"),
        )
        ax = fig.axes[0]
        assert ax.get_title() == _("KV cache bytes")
        assert (ax.get_title() == "Bytes do cache KV") == (language == "pt-BR")  # the plot really speaks it
        assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
        assert overflowing_texts(fig) == []
    finally:
        set_language(None)


def test_visible_texts_are_what_a_reader_sees_ticks_as_drawn_one_list_per_axis():
    from kvlab.plots._figure import DATA_TEXT
    from tools.figure_check import visible_texts

    fig, ax = subplots(figsize=(5, 3))
    ax.plot([0, 1000], [0, 0.5], label="medido")
    ax.set(title="título", xlabel="tokens", ylabel="ms")
    ax.annotate("nota", (500, 0.25))
    ax.text(100, 0.4, "␣the", gid=DATA_TEXT)  # a token the model read: data, in no reader's language
    hidden = ax.text(0, 0, "escondido")
    hidden.set_visible(False)
    ax.legend()
    set_language("pt-BR")
    try:
        shown = visible_texts(fig)
    finally:
        set_language(None)
    assert set(shown["texts"]) == {"título", "tokens", "ms", "nota", "medido"}
    assert shown["data"] == ["␣the"]
    x_ticks, y_ticks = shown["ticks"]
    assert "1.000" in x_ticks and "0,5" in y_ticks  # after kvlab's formatter, in the language of the draw
