"""Translated notebooks: built from the English scripts and a gettext catalog, stale the moment the English moves."""

from __future__ import annotations

import errno
import io
import os
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from babel.messages.pofile import read_po, write_po

from kvlab.atomic import AtomicWriteError
from tools.i18n import notebooks as i18n

ENGLISH = """\
# %% [markdown]
# # 01 · A cache
#
# The cache **grows** by one token per step.

# %%
print(f"{7326720:,} B")

# %% [markdown]
# ## 2. Crop it (Recortar um cache)
#
# ```python
# cache.crop(-4)
#
# cache.crop(2)
# ```
"""
TRANSLATIONS = {
    "# 01 · A cache": "# 01 · Um cache",
    "The cache **grows** by one token per step.": "O cache **cresce** um token por passo.",
    "## 2. Crop it (Recortar um cache)": "## 2. Recortar um cache",
}


def _notebook(tmp_path: Path, text: str = ENGLISH) -> i18n.Paths:
    english = tmp_path / "01_a_cache.py"
    english.write_text(text)
    return i18n.Paths(english, "pt-BR")


def _translate(paths: i18n.Paths, translations: dict[str, str]) -> None:
    with paths.catalog.open("rb") as handle:
        catalog = read_po(handle)
    for message in catalog:
        if message.id:
            message.string = translations.get(message.id, message.id)  # a code block reads the same
            message.flags.discard("fuzzy")
    with paths.catalog.open("wb") as handle:
        write_po(handle, catalog, width=0)


def test_paragraphs_split_on_blank_lines_but_keep_a_code_block_whole():
    text = "# Title\n\nOne line\nand another.\n\n```python\na = 1\n\nb = 2\n```\n\n| a | b |\n|---|---|"
    assert i18n.paragraphs(text) == [
        "# Title",
        "One line\nand another.",
        "```python\na = 1\n\nb = 2\n```",
        "| a | b |\n|---|---|",
    ]


def test_a_new_catalog_lists_every_paragraph_untranslated(tmp_path):
    paths = _notebook(tmp_path)
    assert paths.catalog == tmp_path / "locale" / "pt_BR" / "01_a_cache.po"
    catalog = i18n.update(paths)
    assert [m.id for m in catalog if m.id] == [*TRANSLATIONS][:2] + [
        "## 2. Crop it (Recortar um cache)",
        "```python\ncache.crop(-4)\n\ncache.crop(2)\n```",
    ]
    found = i18n.problems(paths)
    assert len(found) == 4 and all("untranslated paragraph" in problem for problem in found)
    assert found[0].startswith("01_a_cache.py cell 1: ")
    with pytest.raises(LookupError, match="no reviewed translation for '# 01 · A cache'"):
        i18n.translated_script(paths)


def test_a_translated_notebook_keeps_the_code_and_starts_in_its_language(tmp_path):
    paths = _notebook(tmp_path)
    i18n.update(paths)
    _translate(paths, TRANSLATIONS)
    assert i18n.problems(paths) == [f"{paths.script}: out of date; run `python -m tools.i18n.notebooks build`"]
    assert i18n.build(paths) is True and i18n.build(paths) is False  # the second build finds it up to date
    assert i18n.problems(paths) == []
    english, translated = jupytext.read(paths.english), jupytext.read(paths.script)
    assert [c.source for c in translated.cells if c.cell_type == "code"] == [
        'import kvlab\n\nkvlab.set_language("pt-BR")',
        *(c.source for c in english.cells if c.cell_type == "code"),
    ]
    markdown = [c.source for c in translated.cells if c.cell_type == "markdown"]
    assert markdown[0] == "# 01 · Um cache\n\nO cache **cresce** um token por passo."
    assert markdown[1].startswith("## 2. Recortar um cache\n\n```python\ncache.crop(-4)\n\ncache.crop(2)")


def test_the_twin_names_the_jupytext_version_of_its_english_script_not_the_installed_one(tmp_path):
    """A new jupytext release must not make every committed twin "out of date" on a fresh install."""
    header = (
        "# ---\n# jupyter:\n#   jupytext:\n#     text_representation:\n#       extension: .py\n"
        "#       format_name: percent\n#       jupytext_version: 1.0.0\n# ---\n\n"
    )
    paths = _notebook(tmp_path, header + ENGLISH)
    i18n.update(paths)
    _translate(paths, TRANSLATIONS)
    i18n.build(paths)
    assert "#       jupytext_version: 1.0.0\n" in paths.script.read_text(encoding="utf-8")
    assert jupytext.__version__ != "1.0.0" and i18n.problems(paths) == []
    _notebook(tmp_path, header.replace("#       jupytext_version: 1.0.0\n", "") + ENGLISH)  # none named: none written
    i18n.build(paths)
    assert "jupytext_version" not in paths.script.read_text(encoding="utf-8") and i18n.problems(paths) == []


def test_an_english_change_makes_its_translation_fuzzy_and_the_check_fail(tmp_path):
    paths = _notebook(tmp_path)
    i18n.update(paths)
    _translate(paths, TRANSLATIONS)
    i18n.build(paths)
    _notebook(tmp_path, ENGLISH.replace("by one token per step", "by one token per layer per step"))
    found = i18n.problems(paths)
    assert len(found) == 2
    assert "untranslated paragraph 'The cache **grows** by one token per layer per step.'" in found[0]
    assert "stale entry, no English paragraph reads 'The cache **grows** by one token per step.'" in found[1]
    catalog = i18n.update(paths)  # what a translator runs: the old translation comes back, marked for review
    entry = catalog.get("The cache **grows** by one token per layer per step.")
    assert entry.fuzzy and entry.string == "O cache **cresce** um token por passo."
    assert [p for p in i18n.problems(paths) if "fuzzy" in p] and not [p for p in i18n.problems(paths) if "stale" in p]
    with pytest.raises(LookupError):
        i18n.build(paths)  # a fuzzy translation is never published


CODE_CELL = """
# %%
plot_growth(trace, title="Bytes against tokens", field="bytes_held")
print(f"{n:,} new tokens", {"new tokens": n}["new tokens"])
"""


def test_the_text_of_code_cells_is_translated_and_the_code_stays_the_code(tmp_path, capsys):
    paths = _notebook(tmp_path, ENGLISH + CODE_CELL)
    catalog = i18n.update(paths)
    code = [(m.id, m.context) for m in catalog if m.context == i18n.CODE]
    # not field=; the dict key is a run label, translated with its lookup
    assert code == [("Bytes against tokens", "code"), ("{n:,} new tokens", "code"), ("new tokens", "code")]
    assert catalog.get("{n:,} new tokens", "code").auto_comments == [i18n.FIELDS_NOTE]
    assert "untranslated code literal 'Bytes against tokens'" in " ".join(i18n.problems(paths))
    words = {
        "Bytes against tokens": "Bytes em função dos tokens",
        "{n:,} new tokens": "{n:,} tokens novos",
        "new tokens": "tokens novos",
    }
    _translate(paths, {**TRANSLATIONS, **words})
    assert i18n.build(paths) is True and i18n.problems(paths) == []
    cell = [c.source for c in jupytext.read(paths.script).cells if c.cell_type == "code"][-1]
    assert cell == (
        'plot_growth(trace, title="Bytes em função dos tokens", field="bytes_held")\n'
        'print(f"{n:,} tokens novos", {"tokens novos": n}["tokens novos"])'
    )
    _translate(paths, {**TRANSLATIONS, **words, "{n:,} new tokens": "tokens novos: {n}"})  # a field changed
    (found,) = i18n.problems(paths)
    assert "the translation of '{n:,} new tokens' does not fit: the fields must be {n:,}, in this order" in found
    assert i18n.main(["build", str(paths.english)]) == 1
    assert "not built" in capsys.readouterr().out and "tokens novos" in paths.script.read_text()  # the last good one


def test_the_command_line_checks_and_exits_non_zero_on_a_problem(tmp_path, capsys):
    paths = _notebook(tmp_path)
    assert i18n.main(["update", str(paths.english)]) == 0
    assert "4 messages, 4 to translate or review" in capsys.readouterr().out
    assert i18n.main(["check", str(paths.english)]) == 1
    assert "untranslated paragraph" in capsys.readouterr().out


def test_a_full_disk_keeps_the_published_script_and_the_catalog_and_names_the_file(tmp_path, monkeypatch):
    paths = _notebook(tmp_path)
    i18n.update(paths)
    _translate(paths, TRANSLATIONS)
    assert i18n.build(paths) is True
    script = paths.script.read_bytes()
    _notebook(tmp_path, ENGLISH.replace("by one token per step", "by one token per layer per step"))
    i18n.update(paths)
    _translate(paths, TRANSLATIONS)  # the new paragraph reads as itself: the build would change the script
    catalog = paths.catalog.read_bytes()
    _notebook(tmp_path, ENGLISH)  # and the English changes back: the catalog would be rewritten

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(AtomicWriteError, match=f"cannot write {paths.catalog}: No space left on device"):
        i18n.update(paths)
    _notebook(tmp_path, ENGLISH.replace("by one token per step", "by one token per layer per step"))
    with pytest.raises(AtomicWriteError, match=f"cannot write {paths.script}: No space left on device"):
        i18n.build(paths)
    monkeypatch.undo()
    assert paths.script.read_bytes() == script  # the published script, whole: its .ipynb still matches it
    assert paths.catalog.read_bytes() == catalog and read_po(io.BytesIO(catalog)).get(
        "The cache **grows** by one token per layer per step."
    )  # the translator's work, whole
    assert not list(tmp_path.rglob("*.tmp"))


# -- the repository's own notebooks -----------------------------------------------------------------------------
SCRIPTS = i18n.english_scripts()


def test_every_english_notebook_is_found():
    assert len(SCRIPTS) >= 13 and SCRIPTS[0].name == "00_start_here.py"


@pytest.mark.parametrize("english", SCRIPTS, ids=lambda p: p.stem)
def test_every_notebook_has_an_up_to_date_portuguese_twin(english):
    """No untranslated, fuzzy or stale paragraph, and the committed pt-BR script is what `build` writes."""
    paths = i18n.Paths(english, "pt-BR")
    assert i18n.problems(paths) == []
    assert paths.notebook.exists(), f"{paths.notebook} is missing: execute {paths.script} with jupytext"


CHECKED = "# NBVAL_CHECK_OUTPUT"


def _checked_numbers(path: Path) -> list[list[str]]:
    """The numbers printed by each checked cell, digits only (7,326,720 and 7.326.720 read the same)."""
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and CHECKED in c.source]
    numbers = []
    for cell in cells:
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        text += "".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs if "data" in o)
        numbers.append(re.sub(r"(?<=\d)[.,](?=\d)", "", match) for match in re.findall(r"\d[\d.,]*\d|\d", text))
    return [list(n) for n in numbers]


@pytest.mark.parametrize("english", SCRIPTS, ids=lambda p: p.stem)
def test_the_portuguese_notebook_prints_the_same_checked_numbers(english):
    paths = i18n.Paths(english, "pt-BR")
    if not paths.notebook.exists():
        pytest.fail(f"{paths.notebook} is missing")
    assert _checked_numbers(paths.notebook) == _checked_numbers(english.with_suffix(".ipynb"))
