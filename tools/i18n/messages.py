"""kvlab's own message catalog: every `_("...")` and `N_("...")` of the package, extracted with Babel into one PO
per language; the English text is the message id, so a changed label shows up in `check` until it is reviewed.

    python -m tools.i18n.messages update   # add new messages (untranslated), mark changed ones fuzzy, drop removed
    python -m tools.i18n.messages check    # list untranslated, fuzzy and stale messages (exit 1 if any)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir

from kvlab.i18n import LANGUAGES, catalog_path
from tools.i18n import catalogs

PACKAGE = Path(__file__).resolve().parents[2] / "kvlab"  # the package whose messages these are
HEADER = "# Translations of kvlab's plot labels, widget labels and messages. The English text is the message id."


def template() -> Catalog:
    """Every `_("...")`, `N_("...")` and `C_("context", "...")` string of kvlab (f-strings and variables cannot be
    extracted: use format())."""
    catalog = Catalog(project="kvlab", header_comment=HEADER, fuzzy=False)
    keywords = {"_": None, "N_": None, "C_": ((1, "c"), 2)}
    found = extract_from_dir(str(PACKAGE), method_map=[("**.py", "python")], keywords=keywords)
    for filename, lineno, message, _comments, context in found:
        catalog.add(message, locations=[(f"kvlab/{filename}", lineno)], context=context)
    return catalog


def read(language: str) -> Catalog:
    locale = LANGUAGES[language]
    empty = Catalog(project="kvlab", locale=locale, header_comment=HEADER, fuzzy=False)
    return catalogs.read(catalog_path(language), locale, lambda: empty)


def update(language: str) -> Catalog:
    catalog = catalogs.refresh(read(language), template())
    catalogs.write(catalog, catalog_path(language), sort_output=True, include_lineno=False)
    return catalog


def problems(language: str) -> list[str]:
    catalog, source = read(language), template()
    found = []
    for message, state in catalogs.gaps(source, catalog):
        where = ":".join(map(str, message.locations[0]))
        what = "fuzzy (review the translation)" if state == "fuzzy" else "untranslated"
        found.append(f"{where}: {what} {message.id!r}")
    return found + [f"{catalog_path(language).name}: stale {m.id!r}" for m in catalogs.stale(source, catalog)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.i18n.messages", description=__doc__.split("\n\n")[0])
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
