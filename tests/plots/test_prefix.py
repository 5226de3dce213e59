"""kvlab.plots.prefix: the token-prefix check and the deep copies of a prefilled cache."""

import copy

import pytest
import torch
from matplotlib.colors import to_hex
from transformers import DynamicCache, StaticCache

import kvlab
from kvlab.i18n import LANGUAGES, set_language
from kvlab.measure.prefix import TokenPrefix
from kvlab.plots.prefix import DIFFERS, MATCH, QUESTION, plot_prefix_copies, plot_token_prefix
from tools.figure_check import overflowing_texts


def test_token_prefix_boxes_are_coloured_by_the_check():
    spaced = TokenPrefix((1, 2, 3), (1, 2, 9, 4), ("You", ".", "Ġ"), ("You", ".", "ĠWhy", "?"))
    fig = plot_token_prefix(spaced)
    ax = fig.axes[0]
    colors = [to_hex(p.get_facecolor()) for p in ax.patches]
    # prefix row: match, match, differs; full row: match, match, differs (inside the prefix), question
    assert colors == [MATCH, MATCH, DIFFERS, MATCH, MATCH, DIFFERS, QUESTION]
    assert "position 2" in ax.get_title()
    assert [t.get_text() for t in ax.texts][2] == "␣"
    clean = TokenPrefix((1, 2), (1, 2, 9), ("You", "."), ("You", ".", "ĠWhy"))
    ax = plot_token_prefix(clean).axes[0]
    assert [to_hex(p.get_facecolor()) for p in ax.patches] == [MATCH, MATCH, MATCH, MATCH, QUESTION]
    assert ax.get_title().startswith("ids line up")


def test_a_short_prefix_is_drawn_from_position_0():
    tokens = ("You", "Ġare", "Ġa", "Ġhelpful", "Ġassistant", ".", "Ġ")
    guide = TokenPrefix(tuple(range(7)), (0, 1, 2, 3, 4, 5, 9, 10), tokens, tokens[:6] + ("ĠWhat", "Ġis"))
    ax = plot_token_prefix(guide).axes[0]
    assert ax.get_xlim()[0] < 0 < ax.get_xlim()[1]
    assert ax.texts[0].get_text() == "You"  # position 0 is shown, not cut off
    long = TokenPrefix(tuple(range(30)), tuple(range(32)), ("t",) * 30, ("t",) * 32)
    assert plot_token_prefix(long).axes[0].get_xlim()[0] > 20  # a long prefix: only its end, around the seam


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_a_few_boxes_fit_their_figures_in_both_languages(language):
    """Three or four boxes make a figure under 6 inches wide, narrower than its x label ("token position (dashed
    line: ...)") and its Portuguese verdict title: wrapped, each fits, and the figure grows by the lines so the
    boxes keep their size."""
    set_language(language)
    try:
        spaced = TokenPrefix((1, 2, 3), (1, 2, 9, 4), ("You", ".", "Ġ"), ("You", ".", "ĠWhy", "?"))
        clean = TokenPrefix((1, 2), (1, 2, 9), ("You", "."), ("You", ".", "ĠWhy"))
        figures = [plot_token_prefix(spaced), plot_token_prefix(clean)]
        assert [overflowing_texts(fig) for fig in figures] == [[], []]
        width, height = figures[1].get_size_inches()
        assert width == pytest.approx(1.1 * 3 + 1.5) and height > 2.2  # as wide; taller by the wrapped lines
    finally:
        set_language(None)


def test_prefix_copies_from_a_watch_of_the_guides_recipe(tiny, prompt_ids):
    model = tiny("tiny-llama")
    prefix = prompt_ids(6)
    questions = [torch.cat([prefix, prompt_ids(n, seed=n)], dim=-1) for n in (3, 5)]
    with kvlab.watch(model) as watch:
        for prompt_cache in (StaticCache(config=model.config, max_cache_len=20), DynamicCache(config=model.config)):
            with torch.no_grad():
                prompt_cache = model(input_ids=prefix, past_key_values=prompt_cache).cache
            for ids in questions:
                model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=2,
                    do_sample=False,
                    past_key_values=copy.deepcopy(prompt_cache),
                )
    fig = plot_prefix_copies(watch.traces, [9, 11])
    tokens_ax, bytes_ax = fig.axes
    assert [p.get_height() for p in tokens_ax.patches] == [9, 11, 3, 5, 3, 5]  # no reuse, static copies, dynamic copies
    static_bytes, dynamic_bytes = (
        [p.get_height() for p in bytes_ax.patches[:2]],
        [p.get_height() for p in bytes_ax.patches[2:]],
    )
    assert static_bytes[0] == static_bytes[1] > max(dynamic_bytes)  # a static copy holds every slot of max_cache_len
    assert dynamic_bytes[0] < dynamic_bytes[1]  # a dynamic copy holds only the tokens it has seen
    peaks = [t.summary()["peak_bytes"] for t in watch.traces if t.meta.get("copied_from") is not None]
    assert static_bytes + dynamic_bytes == [b / 2**10 for b in peaks]  # a tiny model's copies: KiB, not 0.0x MiB
    assert bytes_ax.get_ylabel() == "bytes held by the copy (KiB)"
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in (tokens_ax, bytes_ax)]
    assert legends == [  # each panel names its own bars: the bytes panel has no "no reuse" bar
        ["no reuse", "StaticCache copy", "DynamicCache copy"],
        ["StaticCache copy", "DynamicCache copy"],
    ]
    assert all(ax.get_title() for ax in (tokens_ax, bytes_ax))  # each panel says what it shows
    try:
        for language in LANGUAGES:  # two legends and two titles: every text fits, in English and in Portuguese
            set_language(language)
            assert overflowing_texts(plot_prefix_copies(watch.traces, [9, 11])) == [], language
    finally:
        set_language(None)
