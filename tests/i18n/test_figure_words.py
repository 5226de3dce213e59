"""No English left in a pt-BR figure, read from the figures themselves: `python -m tools.notebook_exec` records every
text each figure shows (`metadata.kvlab.figure_texts`: titles, labels, legends, annotations, tick labels as drawn),
so a label kvlab fills with an English word ("camadas sliding") or a tick written "0.5" is caught even where every
catalog entry is translated.

A pt-BR word is English when the English twin's figures show it and it is neither a name nor a word of both
languages (ALLOWED, SHARED). Numbers follow Portuguese marks: a "." between digits only groups thousands ("1.024"),
never "0.5" or "1,024.5"; in one axis's ticks a comma is the decimal mark of every numeric label or of none. A
notebook with figures and no recorded texts fails: it was executed before the texts were recorded (re-execute it).
Reads the committed notebooks only: well under a second."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tools.notebook_exec import FIGURE_TEXTS

ROOT = Path(__file__).resolve().parents[2]
PT_BR = sorted((ROOT / "notebooks" / "pt-BR").glob("[0-9][0-9]_*.ipynb"))


def _kept_in_portuguese() -> set[str]:
    """The English words the terms file keeps in Portuguese ("greedy", "flush", "batching contínuo", "decoder"),
    with their plurals ("flushes"): decided once, for the text and the figures alike."""
    import tomllib

    terms = tomllib.loads((ROOT / "kvlab" / "i18n" / "terms_pt_BR.toml").read_text(encoding="utf-8"))["terms"]
    letters = re.compile(r"[^\W\d_]{2,}")
    kept = set()
    for term in terms.values():
        portuguese = {word.lower() for word in letters.findall(term["pt"].split(";")[0])}
        kept |= {word.lower() for word in letters.findall(term["en"])} & portuguese
    return kept | {word + "es" for word in kept} | {word + "s" for word in kept}


# Names and units, written alike in both languages (class names, CamelCase, and names glued to digits, `fp8`,
# are code and never words).
ALLOWED = {
    # the lesson's subject (the pt-BR guide's own words)
    *("cache", "caches", "token", "tokens", "kv", "prompt", "prompts", "forward", "forwards", "tokenizer", "loop"),
    *("layout", "id", "ids", "logits", "notebook", "kernel", "kernels", "chat", "template"),
    *("bytes", "byte", "bits", "bit"),
    *("generate", "deepcopy"),  # functions named as the English does ("após generate"; `crop(-3)` is code anyway)
    # cache backends and models
    *("hqq", "quanto", "gemma", "smollm", "mistral", "llama", "qwen", "bart", "whisper", "jamba"),
    *("mamba", "phi", "gpt", "transformers", "kvlab", "torch", "pytorch", "cuda", "cpu", "gpu", "iqr", "kl"),
    # units (SI and binary prefixes; one-letter ones, "B", "s", "x", are never words) and "vs" between two runs
    *("kb", "mb", "gb", "kib", "mib", "gib", "ms", "µs", "ns", "vs"),
    # code shown as values: the meta device's name, a tensor's dtype, Python's booleans (an option's value)
    *("meta", "dtype", "false", "true"),
}
ALLOWED |= _kept_in_portuguese()
# Portuguese words spelt like English ones ("no" = em + o, "a" = the article, "total", "final"): a pt-BR figure may
# show them, so the English twin's use of them proves nothing. Kept to words both languages write the same way.
SHARED = {"a", "as", "no", "do", "de", "total", "real", "final", "local", "linear", "residual", "nominal", "extra"}

_MATH = re.compile(r"\$[^$]*\$")  # mathtext ("$10^{3}$"): symbols, not words
# code and names: `...`, names glued to digits (`fp8`) or joined to them by a hyphen (`top-1`, `phi-3-mini`),
# snake_case, camelCase, calls, dotted names (`kvlab.watch`, `cache.layers[0].keys`) and kvlab's tiny models
_CODE = re.compile(
    r"`[^`]*`|\S*[^\W\d_]-?\d\S*|\S*\d[^\W\d_]\S*|\S*_\S*|\S*[a-z][A-Z]\S*|[A-Za-z]\w*\(\S*"
    r"|\S*[^\W\d]\.[^\W\d]\S*|\btiny-\S+"
)
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
_NUMBER = re.compile(r"(?<![\w.,])(?<!\w-)\d[\d.,]*(?<=\d)(?!\w)")  # standing alone, not in a name ("Llama-3.2")
_PT_GROUPED = re.compile(r"[1-9]\d{0,2}(?:\.\d{3})+(?:,\d+)?")  # 1.024 / 12.345,5: "." only between thousands


def words(text: str) -> list[str]:
    """The words of a figure text, lower case, without code (`...`, a class name, `max_cache_len`, `crop(-3)`, a
    name glued to digits such as `fp8` or `SmolLM2-135M`) and without mathtext; one-letter words are symbols."""
    bare = _CODE.sub(" ", _MATH.sub(" ", text))
    return [word.lower() for word in _WORD.findall(bare) if len(word) > 1]


def english_words(texts: list[str], english: set[str]) -> list[tuple[str, str]]:
    """(word, text) for each word of the pt-BR `texts` that the English twin shows (`english`: its words) and that
    is neither a name nor a word of both languages."""
    found = []
    for text in texts:
        for word in words(text):
            if word in english and word not in ALLOWED and word not in SHARED:
                found.append((word, text))
    return found


def number_errors(text: str) -> list[str]:
    """Each number of `text` written with English marks: a decimal point ("0.5", "1.5"), or a comma grouping
    thousands before a point or another comma ("1,234.5", "1,234,567"). "1.024" (Portuguese thousands) and "0,5"
    pass; a number glued to a name (`Qwen2.5`, `v4.57`) is a name."""
    wrong = []
    for number in _NUMBER.findall(text.replace("\N{MINUS SIGN}", "-")):
        if "." in number and not _PT_GROUPED.fullmatch(number):
            wrong.append(number)
        elif number.count(",") > 1:
            wrong.append(number)
    return wrong


# A whole number of four or more digits without its group marks ("max_cache_len 3584" in a verdict box; issue 42),
# not a value typed as code (`max_cache_len=3584`, `StaticCache(4096)`) nor a name glued to marks (`Llama-2-7b`).
_UNGROUPED = re.compile(r"(?<![\w.,/=:#'\"\-])(?<!\w\()[1-9]\d{3,}(?![\w.,/'\"\-]|:\d)")


def ungrouped_numbers(text: str) -> list[str]:
    """Each whole number of `text` (four or more digits) a Portuguese reader would read grouped: "3584" -> "3.584"."""
    return _UNGROUPED.findall(text)


def tick_errors(labels: list[str]) -> list[str]:
    """The English-format labels of one axis's ticks: each `number_errors`, and English thousands commas, which
    alone ("1,000") read as a Portuguese decimal: kvlab's ticks give every label the same decimals, so a comma in
    some numeric labels and not in others ("0", "500", "1,000") is a thousands comma."""
    wrong = [number for label in labels for number in number_errors(label)]
    numeric = [label for label in labels if _NUMBER.fullmatch(label.strip().lstrip("-\N{MINUS SIGN}"))]
    with_comma = [label for label in numeric if "," in label]
    if with_comma and len(with_comma) < len(numeric) and all(re.search(r",\d{3}$", x) for x in with_comma):
        wrong += [label for label in with_comma if label not in wrong]
    return wrong


def has_figures(nb) -> bool:
    return any(
        "image/png" in output.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def figure_problems(figures: list[dict], english: set[str]) -> list[str]:
    """One line per problem in a pt-BR notebook's recorded figure texts, naming cell, figure and word or number."""
    problems = []
    for figure in figures:
        where = f"cell {figure['cell']}, figure {figure['figure']}"
        texts = figure["texts"] + [label for labels in figure["ticks"] for label in labels]
        for word, text in english_words(texts, english):
            problems.append(f"{where}: English word {word!r} in {text!r}")
        for text in figure["texts"]:
            problems += [f"{where}: English number format {number!r} in {text!r}" for number in number_errors(text)]
            problems += [f"{where}: {number!r} without group marks in {text!r}" for number in ungrouped_numbers(text)]
        for labels in figure["ticks"]:
            problems += [f"{where}: English number format in tick {label!r}" for label in tick_errors(labels)]
    return list(dict.fromkeys(problems))  # a label repeated on each panel is one problem


def _recorded(nb, name: str) -> list[dict]:
    kvlab = nb.metadata.get("kvlab", {})
    if FIGURE_TEXTS not in kvlab:
        assert not has_figures(nb), (
            f"{name}: shows figures but has no metadata.kvlab.{FIGURE_TEXTS}: it was executed before figure texts "
            f"were recorded; re-execute it (python -m tools.notebook_exec {name})"
        )
        return []
    return kvlab[FIGURE_TEXTS]


@pytest.mark.parametrize("path", PT_BR, ids=lambda path: path.stem)
def test_a_pt_br_figure_shows_no_english_word_and_portuguese_numbers(path):
    twin = path.parents[1] / path.name
    pt_figures = _recorded(nbformat.read(path, as_version=4), str(path.relative_to(ROOT)))
    en_figures = _recorded(nbformat.read(twin, as_version=4), str(twin.relative_to(ROOT)))
    english = {
        word
        for figure in en_figures
        for text in figure["texts"] + [label for labels in figure["ticks"] for label in labels]
        for word in words(text)
    }
    problems = figure_problems(pt_figures, english)
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(problems)


# -- the checker itself, on small inputs -----------------------------------------------------------------------------


def test_words_leave_out_code_names_math_and_symbols():
    assert words("Gemma 3: camadas sliding, x15 (f = full)") == ["gemma", "camadas", "sliding", "full"]
    assert words("DynamicCache vs StaticCache(64): `max_cache_len` em crop(-3)") == ["vs", "em"]
    assert words("SmolLM2-135M-Instruct, fp8, int4, req_7, $10^{3}$") == []
    assert words("model's tokens") == ["model's", "tokens"]
    assert words("top-1, phi-3-mini, tiny-bart, kvlab.watch, cache.layers[0].keys: fim.") == ["fim"]


def test_the_terms_files_english_words_are_allowed_and_others_are_not():
    english = set(words("greedy tokens, flushes, continuous batching, decoder, sliding layers"))
    texts = ["tokens greedy", "passos de flush", "flushes", "batching contínuo", "decoder", "camadas sliding"]
    assert english_words(texts, english) == [("sliding", "camadas sliding")]


def test_an_english_word_the_twin_shows_is_found_and_names_and_shared_words_are_not():
    english = set(words("sliding layers, full layers, no cache, DynamicCache, after crop(-3), total, 8 tokens"))
    texts = ["camadas sliding", "após crop(-3)", "sem cache", "total no cache", "8 tokens", "layers completas"]
    assert english_words(texts, english) == [("sliding", "camadas sliding"), ("layers", "layers completas")]
    assert english_words(["camadas deslizantes"], english) == []
    assert english_words(["after"], set()) == []  # only what the English twin's figures show


def test_english_number_marks_are_found_in_a_text():
    assert number_errors("0,5 ms; 1.024 B; 122.880 posições; 12.345,5") == []
    assert number_errors("0.5 ms e 56.6 e 1,234.5 e 1,234,567") == ["0.5", "56.6", "1,234.5", "1,234,567"]
    assert number_errors("Qwen2.5-0.5B, Llama-3.2-1B, v4.57, crop(-3), StaticCache(4096)") == []
    assert number_errors("\N{MINUS SIGN}0.25") == ["0.25"]


def test_whole_numbers_without_group_marks_are_found_and_typed_values_are_not():
    box = "max_cache_len 3584 vs. max_cache_len 224: 11,09x mais devagar (10,67-11,26)"
    assert ungrouped_numbers(box) == ["3584"]
    assert ungrouped_numbers("max_cache_len 3.584; janela 512; 1.048.576 B") == []
    assert ungrouped_numbers("max_cache_len=3584, StaticCache(4096), Llama-2-7b, x86_64, 2026-12-02") == []


def test_tick_labels_with_english_marks_are_found():
    assert tick_errors(["0,590", "0,595", "0,600"]) == []  # Portuguese decimals, the same on every label
    assert tick_errors(["0", "20.000", "40.000"]) == []
    assert tick_errors(["0.590", "0.595", "0.600"]) == ["0.590", "0.595", "0.600"]
    assert tick_errors(["0", "500", "1,000", "1,500"]) == ["1,000", "1,500"]  # thousands commas
    assert tick_errors(["DynamicCache", "StaticCache(64)"]) == []


def test_a_notebook_with_figures_and_no_recorded_texts_fails():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("plot()")])
    assert _recorded(nb, "x.ipynb") == []  # no figure: nothing to check
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "", "text/plain": "<Figure>"})]
    with pytest.raises(AssertionError, match="no metadata.kvlab.figure_texts"):
        _recorded(nb, "x.ipynb")
    nb.metadata["kvlab"] = {FIGURE_TEXTS: [{"cell": 0, "figure": 0, "texts": ["camadas sliding"], "ticks": [["0.5"]]}]}
    assert figure_problems(_recorded(nb, "x.ipynb"), {"sliding"}) == [
        "cell 0, figure 0: English word 'sliding' in 'camadas sliding'",
        "cell 0, figure 0: English number format in tick '0.5'",
    ]
