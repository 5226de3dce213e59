"""Layer kinds and cache kinds as words a reader reads: "camadas deslizantes", "um cache estático", never "camadas
sliding"; the API values a reader types (`cache_implementation="static"`) stay as they are."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pytest

from kvlab.cache_kinds import KINDS
from kvlab.caches.options import _describe_kinds
from kvlab.explorer.figures import draw_occupancy
from kvlab.i18n import cache_kind_label, layer_kind_label, layer_kind_letter, set_language
from kvlab.plots._figure import subplots
from kvlab.recording.layer_kinds import KIND_BY_LAYER_TYPE
from tools.i18n import messages

matplotlib.use("Agg")

# Every kind kvlab records or builds, read from kvlab's own lists so that a new kind is checked here; all but the
# layer kind "dummy" and the cache kind "none" (no cache), which have no word and are shown as recorded.
LAYER_KINDS = tuple(kind for kind in dict.fromkeys(KIND_BY_LAYER_TYPE.values()) if kind != "dummy")
CACHE_KINDS = tuple(kind.name for kind in KINDS if kind.name != "none")


@pytest.fixture
def portuguese():
    set_language("pt-BR")
    yield
    set_language(None)


def test_english_shows_the_kinds_as_recorded():
    assert [layer_kind_label(k) for k in LAYER_KINDS] == list(LAYER_KINDS)
    assert [layer_kind_label(k, plural=True) for k in LAYER_KINDS] == list(LAYER_KINDS)
    assert [cache_kind_label(k) for k in CACHE_KINDS] == list(CACHE_KINDS)
    assert [layer_kind_letter(k) for k in ("full", "sliding", "chunked")] == ["f", "s", "c"]


def test_portuguese_words_agree_with_camada_and_with_o_cache(portuguese):
    assert [layer_kind_label(k) for k in LAYER_KINDS] == ["completa", "deslizante", "em blocos", "linear"]
    assert [layer_kind_label(k, plural=True) for k in LAYER_KINDS] == [
        "completas",
        "deslizantes",
        "em blocos",
        "lineares",
    ]
    assert [cache_kind_label(k) for k in ("dynamic", "static", "quantized")] == ["dinâmico", "estático", "quantizado"]
    assert [k for k in CACHE_KINDS if cache_kind_label(k) == k] == []  # every cache kind has its Portuguese word
    assert [layer_kind_letter(k) for k in ("full", "sliding", "chunked")] == ["c", "d", "b"]
    assert layer_kind_label("dummy") == "dummy" and cache_kind_label("none") == "none"  # no word: as recorded


def test_every_kind_word_is_in_the_catalog_with_its_context():
    """Babel extracts the words from `C_("layer kind", "full")`, so `messages check` lists a missing one."""
    extracted = {(m.context, m.id) for m in messages.template() if m.context}
    assert {("layer kind", k) for k in LAYER_KINDS} | {("layer kinds", k) for k in LAYER_KINDS} <= extracted
    assert {("cache kind", k) for k in CACHE_KINDS} <= extracted


def test_a_refusal_counts_the_layers_in_the_readers_words(portuguese):
    assert _describe_kinds(["sliding", "sliding", "full"], 4) == (
        "as suas 3 camadas são 2 deslizantes, 1 completa (janela deslizante de 4)"
    )
    set_language("en")
    assert _describe_kinds(["sliding", "sliding", "full"], 4) == "its 3 layers are 2 sliding, 1 full (sliding window 4)"


@pytest.mark.parametrize(
    ("language", "title", "ticks"),
    [("en", "(f = full, s = sliding)", ["0 f", "1 s"]), ("pt-BR", "(c = completa, d = deslizante)", ["0 c", "1 d"])],
)
def test_the_explorer_occupancy_spells_out_its_letters_in_the_readers_language(language, title, ticks):
    set_language(language)
    try:
        rows = [
            {"layer_idx": i, "layer_kind": kind, "logical_length": 4, "slots_live": 4, "slots_masked": 0}
            for i, kind in enumerate(["full", "sliding"])
        ]
        fig, ax = subplots(1, 1)
        draw_occupancy(ax, rows)
        assert ax.get_title().endswith(title)
        assert [t.get_text() for t in ax.get_yticklabels()] == ticks
        plt.close(fig)
    finally:
        set_language(None)
