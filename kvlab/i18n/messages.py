"""kvlab's own message catalog: every `_("...")` in the package, extracted with Babel into one PO per language.

    python -m kvlab.i18n.messages update   # add new messages (untranslated), mark changed ones fuzzy, drop removed
    python -m kvlab.i18n.messages check    # list untranslated, fuzzy and stale messages (exit 1 if any)

The English text in the source is the message id, so a label reads the same in the code and in an English plot,
and a changed label shows up in `check` until its translation is reviewed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from kvlab.i18n import LANGUAGES, LOCALE_DIR

PACKAGE = Path(__file__).resolve().parent.parent
HEADER = "# Translations of kvlab's plot labels, widget labels and messages. The English text is the message id."


def catalog_path(language: str) -> Path:
    return LOCALE_DIR / LANGUAGES[language] / "LC_MESSAGES" / "kvlab.po"


def template() -> Catalog:
    """Every `_("...")` string in kvlab's modules, and every `N_("...")` (English kept in a constant or a default
    argument, translated with `_()` where it is shown). F-strings and variables cannot be extracted: use format()."""
    catalog = Catalog(project="kvlab", header_comment=HEADER, fuzzy=False)
    found = extract_from_dir(str(PACKAGE), method_map=[("**.py", "python")], keywords={"_": None, "N_": None})
    for filename, lineno, message, _comments, _context in found:
        catalog.add(message, locations=[(f"kvlab/{filename}", lineno)])
    return catalog


def read(language: str) -> Catalog:
    path = catalog_path(language)
    if not path.exists():
        return Catalog(project="kvlab", locale=LANGUAGES[language], header_comment=HEADER, fuzzy=False)
    with path.open("rb") as handle:
        return read_po(handle, locale=LANGUAGES[language])


def update(language: str) -> Catalog:
    catalog = read(language)
    catalog.update(template())
    catalog.obsolete.clear()
    catalog.fuzzy = False
    path = catalog_path(language)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        write_po(handle, catalog, width=0, omit_header=False, include_previous=True, sort_output=True)
    return catalog


def problems(language: str) -> list[str]:
    """Messages of the source without a reviewed translation, and catalog entries the source no longer has."""
    catalog = read(language)
    source = template()
    found = []
    for message in source:
        if not message.id:
            continue
        entry = catalog.get(message.id)
        where = ":".join(map(str, message.locations[0]))
        if entry is None or not entry.string:
            found.append(f"{where}: untranslated {message.id!r}")
        elif entry.fuzzy:
            found.append(f"{where}: fuzzy (review the translation) {message.id!r}")
    ids = {m.id for m in source}
    found += [f"{catalog_path(language).name}: stale {m.id!r}" for m in catalog if m.id and m.id not in ids]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvlab.i18n.messages", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("update", "check"))
    parser.add_argument("--lang", default="pt-BR", choices=sorted(set(LANGUAGES) - {"en"}))
    args = parser.parse_args(argv)
    if args.action == "update":
        catalog = update(args.lang)
        todo = sum(1 for m in catalog if m.id and (not m.string or m.fuzzy))
        print(f"{catalog_path(args.lang)}: {len(catalog)} messages, {todo} to translate or review")
        return 0
    found = problems(args.lang)
    print("\n".join(found) or f"kvlab's messages are all translated into {args.lang}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
