"""Translated notebooks: each English jupytext script (`notebooks/NN_name.py`, the one source of code and numbers)
with its markdown paragraphs, the code literals a reader sees (`literals`, msgctxt "code") and the code comments
(`comments`, msgctxt "comment") replaced from `notebooks/locale/<lang>/NN_name.po` (any PO editor), and a first cell
that switches kvlab's own messages to the language. A changed English message comes back fuzzy (Babel), and
`make test` fails until it is reviewed.

    python -m tools.i18n.notebooks update   # refresh the catalogs from the English notebooks
    python -m tools.i18n.notebooks build    # write notebooks/<lang>/NN_name.py from English + catalog
    python -m tools.i18n.notebooks check    # list missing, fuzzy and stale translations (exit 1 if any)
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog

from kvlab.atomic import write_text
from tools.i18n import catalogs, comments, literals

LANGUAGES = {"pt-BR": "pt_BR"}  # notebook folder name -> gettext locale
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
FENCE = re.compile(r"^\s*(```|~~~)")
FORMAT_FLAGS = {"python-format", "python-brace-format"}
CODE = "code"  # the msgctxt of a code cell's literal: the same words in a paragraph are another message
COMMENT = "comment"  # the msgctxt of a code cell's comment
KINDS = {CODE: "code literal", COMMENT: "code comment", None: "paragraph"}
FIELDS_NOTE = "f-string: keep every {...} field as written and in order"


def paragraphs(markdown: str) -> list[str]:
    """The paragraphs of a markdown cell: blocks separated by blank lines, a fenced code block kept whole."""
    blocks, current, fenced = [], [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


@dataclass(frozen=True)
class Paths:
    english: Path  # notebooks/NN_name.py
    language: str  # "pt-BR"

    @property
    def catalog(self) -> Path:
        return self.english.parent / "locale" / LANGUAGES[self.language] / f"{self.english.stem}.po"

    @property
    def script(self) -> Path:
        return self.english.parent / self.language / self.english.name

    @property
    def notebook(self) -> Path:
        return self.script.with_suffix(".ipynb")


def english_scripts(folder: Path = NOTEBOOKS) -> list[Path]:
    return sorted(folder.glob("[0-9][0-9]_*.py"))


def _read(english: Path):
    """The notebook and its run labels: a label and its lookups translate together."""
    import jupytext

    notebook = jupytext.read(english)
    return notebook, literals.label_keys(cell.source for cell in notebook.cells if cell.cell_type == "code")


HEADER = (
    "Translations of a kvlab notebook. Each message is one markdown paragraph of the English notebook, "
    'or (msgctxt "code") one string literal of its code that a reader sees, or (msgctxt "comment") one comment of its '
    "code."
)


def _catalog(**fields) -> Catalog:
    return Catalog(
        project="kvlab notebooks",
        header_comment=f"# {HEADER}",
        copyright_holder="kvlab contributors",
        creation_date=catalogs.FIXED_DATE,
        revision_date=catalogs.FIXED_DATE,
        last_translator="kvlab contributors",
        fuzzy=False,
        **fields,
    )


def template(english: Path) -> Catalog:
    """Every markdown paragraph and translatable code literal of `english`, untranslated (location: cell number)."""
    catalog = _catalog()
    notebook, labels = _read(english)
    for index, cell in enumerate(notebook.cells, start=1):
        where = [(english.name, index)]
        if cell.cell_type == "markdown":
            for paragraph in paragraphs(cell.source):
                catalog.add(paragraph, locations=where)
        elif cell.cell_type == "code":
            for literal in literals.find(cell.source, labels):
                notes = [FIELDS_NOTE] if literal.fields else []
                catalog.add(literal.message, locations=where, context=CODE, auto_comments=notes)
            for comment in comments.find(cell.source):
                catalog.add(comment.message, locations=where, context=COMMENT)
    for message in catalog:
        message.flags -= FORMAT_FLAGS  # prose ("4 % is") and f-string fields that Babel takes for format strings
    return catalog


def read_catalog(path: Path, language: str) -> Catalog:
    locale = LANGUAGES[language]
    return catalogs.read(path, locale, lambda: _catalog(locale=locale, language_team=language))


def update(paths: Paths) -> Catalog:
    """Bring the catalog in line with the English notebook (`catalogs.refresh`)."""
    catalog = catalogs.refresh(read_catalog(paths.catalog, paths.language), template(paths.english))
    for message in catalog:
        message.flags -= FORMAT_FLAGS  # as in `template`
    catalogs.write(catalog, paths.catalog, sort_output=False, include_lineno=True)  # the cell number
    return catalog


def problems(paths: Paths) -> list[str]:
    """Each message without a reviewed translation, a literal's translation that does not fit it, each stale entry,
    and a translated script that differs from what `build` writes."""
    catalog, english = read_catalog(paths.catalog, paths.language), template(paths.english)
    found = []
    for message, state in catalogs.gaps(english, catalog):
        where = f"{paths.english.name} cell {message.locations[0][1]}"
        kind = KINDS[message.context]
        what = "fuzzy (the English changed; review the translation)" if state == "fuzzy" else f"untranslated {kind}"
        found.append(f"{where}: {what} {_start(message.id)!r}")
    for index, literal in _code_literals(paths.english):
        entry = catalog.get(literal.message, CODE)
        if catalogs.is_reviewed(entry):
            found += [
                f"{paths.english.name} cell {index}: the translation of {_start(literal.message)!r} does not fit: {p}"
                for p in literals.problems(literal, entry.string)
            ]
    found += [
        f"{paths.catalog.name}: stale entry, no English {KINDS[m.context]} reads {_start(m.id)!r}"
        for m in catalogs.stale(english, catalog)
    ]
    if not found and (
        not paths.script.exists() or paths.script.read_text(encoding="utf-8") != translated_script(paths)
    ):
        found.append(f"{paths.script}: out of date; run `python -m tools.i18n.notebooks build`")
    return found


def _code_literals(english: Path) -> list[tuple[int, literals.Literal]]:
    notebook, labels = _read(english)
    cells = [(index, cell.source) for index, cell in enumerate(notebook.cells, start=1) if cell.cell_type == "code"]
    return [(index, literal) for index, source in cells for literal in literals.find(source, labels)]


def _start(text: str) -> str:
    line = text.splitlines()[0]
    return line if len(line) <= 60 else line[:57] + "..."


def translated_notebook(paths: Paths):
    """The English notebook translated, with the language cell in front of the first code cell."""
    from nbformat.v4 import new_code_cell

    catalog = read_catalog(paths.catalog, paths.language)
    notebook, labels = _read(paths.english)
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = "\n\n".join(_translation(catalog, p) for p in paragraphs(cell.source))
        elif cell.cell_type == "code":
            cell.source = literals.translate(cell.source, lambda lit: _translation(catalog, lit.message, CODE), labels)
            cell.source = comments.translate(cell.source, lambda c: _translation(catalog, c.message, COMMENT))
    first_code = next(i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code")
    notebook.cells.insert(first_code, new_code_cell(f'import kvlab\n\nkvlab.set_language("{paths.language}")'))
    return notebook


def _translation(catalog: Catalog, text: str, context: str | None = None) -> str:
    entry = catalog.get(text, context)
    if not catalogs.is_reviewed(entry):
        raise LookupError(f"no reviewed translation for {_start(text)!r}; run `check` for the full list")
    return entry.string


def translated_script(paths: Paths) -> str:
    """The translated script, its header naming the jupytext version the English script names (or none): the twin
    depends on the English text and the catalog, not on which jupytext release happens to be installed."""
    import jupytext

    text = jupytext.writes(translated_notebook(paths), fmt="py:percent")
    english = _JUPYTEXT_VERSION.search(paths.english.read_text(encoding="utf-8"))
    return _JUPYTEXT_VERSION.sub(english.group(0) if english else "", text, count=1)


_JUPYTEXT_VERSION = re.compile(r"^#\s+jupytext_version: .*\n", re.MULTILINE)


def build(paths: Paths) -> bool:
    """Write the translated script; True when it changed (its .ipynb then needs executing again)."""
    text = translated_script(paths)
    if paths.script.exists() and paths.script.read_text(encoding="utf-8") == text:
        return False
    paths.script.parent.mkdir(parents=True, exist_ok=True)
    write_text(paths.script, text)  # atomic: a failed build leaves the published script as it was
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.i18n.notebooks", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("update", "build", "check"))
    parser.add_argument("--lang", default="pt-BR", choices=sorted(LANGUAGES))
    parser.add_argument("notebooks", nargs="*", type=Path, help="English scripts (default: all)")
    args = parser.parse_args(argv)
    everything = [Paths(path, args.lang) for path in (args.notebooks or english_scripts())]
    if args.action == "update":
        for paths in everything:
            catalog = update(paths)
            todo = sum(1 for m in catalog if m.id and (not m.string or m.fuzzy))
            print(f"{paths.catalog}: {len(catalog)} messages, {todo} to translate or review")
        return 0
    if args.action == "build":
        failed = 0
        for paths in everything:
            try:
                print(f"{paths.script}: {'written' if build(paths) else 'up to date'}")
            except (LookupError, ValueError) as err:  # a message without a reviewed, fitting translation: file kept
                print(f"{paths.script}: not built, {err}")
                failed += 1
        return 1 if failed else 0
    found = [problem for paths in everything for problem in problems(paths)]
    print("\n".join(found) or f"every {args.lang} notebook is translated and up to date")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
