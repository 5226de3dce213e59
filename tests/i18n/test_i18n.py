"""kvlab's own words in two languages: `set_language`, the message catalog, numbers, and real plots, the HTML summary
and the Cache Explorer drawn in English and in Portuguese.

Every test that changes the language gives it back (`language` fixture), so the rest of the suite stays English.
"""

from __future__ import annotations

import re

import matplotlib
import pytest
import torch
from babel.messages.pofile import read_po
from matplotlib.ticker import FuncFormatter

import kvlab
from kvlab import html as kvlab_html
from kvlab.i18n import _, current_language, number, percent, set_language
from kvlab.plots._figure import subplots, tick_decimals
from kvlab.plots.growth import plot_growth
from kvlab.plots.occupancy import plot_occupancy
from kvlab.plots.slots import plot_slots
from kvlab.predictions import score
from kvlab.units import human_bytes
from tools.i18n import messages

matplotlib.use("Agg")

PRESETS = {"short": "The KV cache"}  # 12 tokens for a tiny model (one per byte)


@pytest.fixture
def language():
    """set_language for one test; the default (English here) is back afterwards."""
    yield set_language
    set_language(None)


@pytest.fixture(scope="module")
def trace():
    """A static cache of 16 slots on the tiny Llama: 10 prompt tokens, 3 new."""
    ids = torch.arange(3, 13).view(1, 10)
    return kvlab.run(
        kvlab.tiny_model("tiny-llama"), None, ids, cache="static", max_new_tokens=3, max_cache_len=16
    ).trace


# -- choosing the language ---------------------------------------------------------------------------------------
def test_an_unknown_language_is_refused_naming_the_valid_ones(language):
    with pytest.raises(ValueError, match=r"unknown language 'fr'; kvlab speaks en, pt-BR"):
        language("fr")
    assert current_language() == "en"  # nothing changed


@pytest.mark.parametrize("spelling", ["pt-BR", "pt_br", "PT-br", "pt_BR"])
def test_portuguese_is_found_however_it_is_spelled(language, spelling):
    assert language(spelling) is None and current_language() == "pt-BR"  # quiet as a notebook's first line


def test_kvlab_lang_sets_the_default_and_set_language_none_goes_back_to_it(language, monkeypatch):
    monkeypatch.setenv("KVLAB_LANG", "pt_BR.UTF-8")
    language(None)
    assert current_language() == "pt-BR"
    language("en")
    assert current_language() == "en"  # an explicit choice wins over the environment
    language(None)
    assert current_language() == "pt-BR"
    monkeypatch.setenv("KVLAB_LANG", "en")
    assert current_language() == "en"


def test_the_top_level_names_are_the_same_functions():
    assert kvlab.set_language is set_language and kvlab.current_language is current_language


# -- the catalog ---------------------------------------------------------------------------------------------------
def test_messages_are_english_by_default_and_portuguese_when_chosen(language):
    words = ("masked", "allocated", "live", "Run")
    assert [_(w) for w in words] == list(words)
    language("pt-BR")
    assert [_(w) for w in words] == ["mascaradas", "alocadas", "ocupadas", "Executar"]
    assert _("a message kvlab never had") == "a message kvlab never had"  # a gap stays English, never fails


def test_the_catalog_is_complete_and_not_stale():
    assert messages.problems("pt-BR") == []


def test_every_translation_keeps_the_placeholders_of_its_message():
    with messages.catalog_path("pt-BR").open("rb") as handle:
        catalog = read_po(handle)
    placeholder = re.compile(r"\{[^{}]*\}")
    wrong = [
        m.id for m in catalog if m.id and sorted(placeholder.findall(m.id)) != sorted(placeholder.findall(m.string))
    ]
    assert wrong == []
    assert len([m for m in catalog if m.id]) > 200


# -- numbers -------------------------------------------------------------------------------------------------------
def test_numbers_use_the_marks_of_the_language(language):
    assert (number(7_326_720), number(1234.56, 1), number(0.5, 2, grouping=False)) == ("7,326,720", "1,234.6", "0.50")
    language("pt-BR")
    assert (number(7_326_720), number(1234.56, 1), number(0.5, 2, grouping=False)) == ("7.326.720", "1.234,6", "0,50")


def test_percentages_use_the_same_marks_and_one_space_before_the_sign(language):
    assert (percent(84.375, 2), percent(5, 0), percent(1234.5)) == ("84.38%", "5%", "1,234.5%")
    language("pt-BR")
    assert (percent(84.375, 2), percent(5, 0), percent(1234.5)) == ("84,38%", "5%", "1.234,5%")


def test_tick_decimals_are_the_fewest_that_tell_the_ticks_apart():
    assert tick_decimals([0, 5000, 10000]) == 0
    assert tick_decimals([0, 0.25, 0.5, 0.75]) == 2  # one decimal would print 0.2 for 0.25
    assert tick_decimals([0.1, 0.2, 0.30000000000000004]) == 1  # float noise is not a decimal
    assert tick_decimals([]) == 0


def tick_labels(axis) -> list[str]:
    axis.figure.draw_without_rendering()
    return [t.get_text() for t in axis.get_ticklabels()]


@pytest.mark.parametrize(("lang", "big", "small"), [("en", "10,000", "0.25"), ("pt-BR", "10.000", "0,25")])
def test_figure_ticks_are_numbers_as_kvlab_prints_them(language, lang, big, small):
    language(lang)
    fig, (numbers, categories) = subplots(1, 2)
    numbers.plot([0, 20_000], [0, 0.75])
    numbers.set_xticks([0, 10_000, 20_000])
    numbers.set_yticks([0, 0.25, 0.5])
    categories.bar(["turn 1", "turn 2"], [1, 2])
    assert big in tick_labels(numbers.xaxis) and small in tick_labels(numbers.yaxis)
    assert tick_labels(categories.xaxis) == ["turn 1", "turn 2"]  # a category axis keeps its own formatter
    numbers.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:.0f} B"))
    assert "10000 B" in tick_labels(numbers.xaxis)  # a plot's own formatter still wins


def test_bytes_for_a_reader_follow_the_language_and_command_output_stays_english(language):
    values = [0, 512, 1000, 1023, 1024, 1536, 7_326_720, 3.5 * 2**30, 1999.5 * 2**20]
    for decimals in (1, 2):  # English: the localized form is the plain one, character for character
        assert [human_bytes(v, decimals, localized=True) for v in values] == [human_bytes(v, decimals) for v in values]
    language("pt-BR")
    assert human_bytes(1536, 1, localized=True) == "1,5 KiB"
    assert human_bytes(1000, localized=True) == "1.000 B"
    assert human_bytes(1536, 1) == "1.5 KiB"  # `kvlab size`, the bench report: read by scripts, always English


def test_prediction_scores_in_both_languages(language):
    assert score(1500, 1200, unit=" B") == "your guess 1,500 B; measured 1,200 B: +25% (far off)"
    open_question = score(None, 1200, kind="count")
    assert open_question.startswith("no guess yet") and "1,200" not in open_question  # the answer is folded away
    assert "measured 1,200." in open_question._repr_html_()
    language("pt-BR")
    assert score(1500, 1200, unit=" B") == "seu palpite 1.500 B; medido 1.200 B: +25% (longe)"
    open_question = score(None, 1200, kind="count")
    assert open_question.startswith("ainda sem palpite") and "1.200" not in open_question
    assert "medido: 1.200." in open_question._repr_html_()


# -- both languages render -------------------------------------------------------------------------------------------
def texts(fig) -> dict:
    """The words of a figure: its title, and per axes its title, axis labels and legend entries."""
    out = {"suptitle": fig._suptitle.get_text() if fig._suptitle else ""}
    for n, ax in enumerate(fig.axes):
        legend = ax.get_legend()
        out[n] = {
            "title": ax.get_title(),
            "xlabel": ax.get_xlabel(),
            "ylabel": ax.get_ylabel(),
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        }
    return out


PLOTS = {
    "en": {
        "slots": {
            "title": "Allocated vs live vs masked slots",
            "xlabel": "step (0 = prefill)",
            "ylabel": "slots, summed over layers",
            "legend": ["live", "masked (allocated, empty)", "allocated"],
        },
        "occupancy": ("Cache occupancy per layer and step", "live slots", "tokens evicted (cumulative)", "tokens"),
        "growth": {
            "title": "KV-cache bytes against tokens",
            "xlabel": "tokens seen (prompt + generated)",
            "ylabel": "cache bytes (MiB)",
            "legend": ["cache: total", "formula: 7,326,720 B/token"],
        },
    },
    "pt-BR": {
        "slots": {
            "title": "Posições alocadas, ocupadas e mascaradas",
            "xlabel": "passo (0 = pré-preenchimento)",
            "ylabel": "posições, somadas sobre as camadas",
            "legend": ["ocupadas", "mascaradas (vazias)", "alocadas"],
        },
        "occupancy": (
            "Ocupação do cache por camada e passo",
            "posições ocupadas",
            "tokens descartados (acumulado)",
            "tokens",
        ),
        "growth": {
            "title": "Bytes do cache KV em função dos tokens",  # kvlab.po: one word, "cache KV" (terms_pt_BR.toml)
            "xlabel": "tokens vistos (prompt + gerados)",
            "ylabel": "bytes do cache (MiB)",
            "legend": ["cache: total", "fórmula: 7.326.720 B/token"],
        },
    },
}


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_plots_are_drawn_in_the_chosen_language(language, trace, lang):
    language(lang)
    expected = PLOTS[lang]
    assert texts(plot_slots(trace))[0] == expected["slots"]

    occupancy = texts(plot_occupancy(trace))
    suptitle, live, evicted, colorbar = expected["occupancy"]
    assert occupancy["suptitle"] == suptitle
    assert (occupancy[0]["title"], occupancy[1]["title"]) == (live, evicted)
    assert occupancy[0]["xlabel"] == occupancy[1]["xlabel"] == expected["slots"]["xlabel"]
    assert occupancy[2]["ylabel"] == colorbar  # the colour bars are axes too

    assert texts(plot_growth(trace, formula_bytes_per_token=7_326_720))[0] == expected["growth"]


@pytest.mark.parametrize(
    ("lang", "words"),
    [
        ("en", ["steps (0 = prefill)", "slots masked", "peak bytes", "prompt 10 tokens, 3 new"]),
        (
            "pt-BR",
            ["passos (0 = pré-preenchimento)", "posições mascaradas", "bytes de pico", "prompt de 10 tokens, 3 novos"],
        ),
    ],
)
def test_the_html_summary_is_written_in_the_chosen_language(language, trace, lang, words):
    language(lang)
    shown = kvlab_html.trace_html(trace)
    assert all(w in shown for w in words), shown
    bytes_cell = re.search(r'data-field="peak_bytes" data-value="(\d+)"[^>]*>([^<]+)<', shown)
    peak, text = int(bytes_cell.group(1)), bytes_cell.group(2)
    assert text == human_bytes(peak, 1, localized=True)
    assert ("," in text) == (lang == "pt-BR" and peak >= 1024)  # "12,0 KiB" in Portuguese, "12.0 KiB" in English


EXPLORER = {
    "en": {
        "buttons": ["Run", "Stop", "Add to comparison", "Clear comparison", "Crop", "Save trace (JSON)"],
        "controls": {"model": "model", "preset": "preset", "max_new_tokens": "max new tokens"},
        "custom": "(your own text)",
        "status": "Choose a model and a cache, then press Run.",
        "empty_table": "No runs yet",
        "done": "done: 3 tokens (",
        "headers": ["run", "prompt", "allocated", "live", "masked", "waste %"],
        "now": "now",
        "titles": ["bytes held, per layer kind", "allocated vs live vs masked slots"],
        "map": ["live", "masked (allocated, empty)"],
    },
    "pt-BR": {
        "buttons": [
            "Executar",
            "Parar",
            "Adicionar à comparação",
            "Limpar comparação",
            "Recortar",
            "Salvar trace (JSON)",
        ],
        "controls": {"model": "modelo", "preset": "predefinido", "max_new_tokens": "máx. de tokens novos"},
        "custom": "(seu próprio texto)",
        "status": "Escolha um modelo e um cache e pressione Executar.",
        "empty_table": "Nenhuma execução ainda",
        "done": "concluída: 3 tokens (",
        "headers": ["execução", "prompt", "alocadas", "ocupadas", "mascaradas", "desperdício %"],
        "now": "agora",
        "titles": ["bytes guardados, por tipo de camada", "posições alocadas, ocupadas e mascaradas"],
        "map": ["ocupadas", "mascaradas (vazias)"],
    },
}


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_the_explorer_runs_in_the_chosen_language(language, lang):
    ex = kvlab.explore(model_name="tiny-llama", prompt_presets=PRESETS, lang=lang)
    assert current_language() == lang  # explore(lang=...) chose it for everything kvlab draws
    words = EXPLORER[lang]
    buttons = [ex.run_button, ex.stop_button, ex.compare_button, ex.clear_button, ex.crop_button, ex.save_trace_button]
    assert [b.description for b in buttons] == words["buttons"]
    assert {name: getattr(ex.controls, name).description for name in words["controls"]} == words["controls"]
    assert (words["custom"], "(your own text)") in ex.controls.preset.options  # the label changes, never the value
    assert ex.status.value == words["status"] and words["empty_table"] in ex.table.value
    # the menu shows a kind in the reader's words; its value stays the identifier a request takes
    shown = {"en": ("static", "none"), "pt-BR": ("estático", "nenhum (sem cache)")}[lang]
    assert [k for k in ex.controls.cache.options if k[1] == "static"] == [(shown[0], "static")]
    assert [k for k in ex.controls.cache.options if k[1] == "none"] == [(shown[1], "none")]

    run = ex.run_and_wait(cache="static", max_cache_len=32, max_new_tokens=3)
    assert run is not None and run.result is not None, ex.message_text
    assert ex.status.value.startswith(words["done"]), ex.status.value
    kind = {"en": "static", "pt-BR": "estático"}[lang]  # the run's label, in the table and titles: the kind in words
    assert run.label == f"tiny-llama · {kind} (max_cache_len=32)", run.label
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", ex.table.value)
    assert all(h in headers for h in words["headers"]), headers
    assert 'data-run="now"' in ex.table.value  # the row's key stays; only what is shown is translated
    assert re.search(r'<td data-field="run"[^>]*>' + words["now"] + "</td>", ex.table.value)
    figure = texts(ex._figure(run))
    assert [figure[0]["title"], figure[1]["title"]] == words["titles"]
    assert set(words["map"]) <= set(figure[2]["legend"])
    (row,) = ex.summary_rows()
    layers = len(run.result.trace.final_layers())
    assert row["run"] == "now" and row["slots_allocated"] == layers * 32  # the data are the same in any language
