"""kvlab's own words in the reader's language: plot titles, axis labels, legends, widget labels and messages.

    import kvlab
    kvlab.set_language("pt-BR")   # or KVLAB_LANG=pt-BR, or a pt_BR locale

English is the source text and the message id. Translations live in gettext catalogs
(`kvlab/locale/<locale>/LC_MESSAGES/kvlab.po`), read with Babel the first time a language needs them, so
`import kvlab` stays light and a translator edits one standard file. A message without a translation stays
English rather than failing: a missing label is a gap, not an error (the tests list every gap).

Numbers a reader compares (bytes, token counts, shares) are written one way per language, by one function:
`number` (46,080 / 46.080, 84.38 / 84,38) and `percent` (84.38 % / 84,38 %) for printed text, and the same
`number` behind the tick labels of kvlab's figures (`kvlab.plots._figure.NumberFormatter`), so a number reads
the same in a sentence, a printed table and on an axis.
"""

from __future__ import annotations

import functools
import locale as _locale
import os
from pathlib import Path

LANGUAGES = {"en": "en", "pt-BR": "pt_BR"}  # what set_language takes -> gettext/Babel locale
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
_chosen: str | None = None


def _spoken(code: str | None) -> str | None:
    """The language kvlab speaks that `code` names in any case, with "_" or "-" ("pt_br" -> "pt-BR"), else None."""
    code = (code or "").replace("_", "-").lower()
    return next((language for language in LANGUAGES if language.lower() == code), None)


def set_language(language: str | None) -> None:
    """Use `language` ("en" or "pt-BR", any case, "_" or "-") for everything kvlab draws or prints from now on;
    None goes back to the default (KVLAB_LANG, then the locale). `current_language()` says which is in use.
    Returns nothing, so the call is a quiet first line of a notebook."""
    global _chosen
    if language is not None and _spoken(language) is None:
        raise ValueError(f"unknown language {language!r}; kvlab speaks {', '.join(LANGUAGES)}")
    _chosen = _spoken(language)


def current_language() -> str:
    """The language set by `set_language`, else KVLAB_LANG, else the process locale when kvlab speaks it."""
    if _chosen is not None:
        return _chosen
    for candidate in (os.environ.get("KVLAB_LANG"), os.environ.get("LC_ALL"), os.environ.get("LANG")):
        if candidate and (language := _spoken(candidate.split(".")[0])) is not None:  # "pt_BR.UTF-8" -> "pt-BR"
            return language
    try:
        code = _locale.getlocale()[0]
    except ValueError:
        code = None
    return _spoken(code) or "en"


def catalog_path(language: str) -> Path:
    """Where kvlab's messages in `language` live (a gettext PO file shipped in the package)."""
    return LOCALE_DIR / LANGUAGES[language] / "LC_MESSAGES" / "kvlab.po"


@functools.cache
def _catalog(language: str) -> dict[str, str]:
    """msgid -> translation of one language (reviewed entries only)."""
    if language == "en":
        return {}
    from babel.messages.catalog import Catalog

    from kvlab.i18n import catalogs

    catalog = catalogs.read(catalog_path(language), LANGUAGES[language], Catalog)
    return {m.id: m.string for m in catalog if m.id and catalogs.is_reviewed(m)}


def _(message: str) -> str:
    """`message` in the current language (the English text when it has no translation)."""
    return _catalog(current_language()).get(message, message)


def N_(message: str) -> str:
    """`message` unchanged, marked for the catalog: for English text kept in a module constant (or a default
    argument), translated with `_()` where it is shown, so the language is the one in use at that moment."""
    return message


def number(value: float, decimals: int = 0, grouping: bool = True) -> str:
    """A number with the current language's digit grouping and decimal mark: 7,326,720.5 / 7.326.720,5.

    Rounded as Python's format rounds (so English reads exactly as `f"{value:,.{decimals}f}"`, or without the
    group separators when `grouping` is False); only the marks change with the language."""
    return marks(f"{value:{',' if grouping else ''}.{decimals}f}")


def percent(value: float, decimals: int = 1) -> str:
    """A share already in percent, as `number` writes it, then " %": "84.38 %" / "84,38 %" (`percent(84.375, 2)`).
    The space is the one kvlab's printed scores and tables already put before the sign, in both languages."""
    return f"{number(value, decimals, grouping=True)} %"


def marks(text: str) -> str:
    """A number Python formatted (`,` between groups, `.` before the decimals: `f"{x:g}"`, `f"{x:,}"`) written with
    the current language's marks instead (Babel's symbols): "1,234.5" -> "1.234,5" in Portuguese."""
    language = current_language()
    if language == "en":
        return text
    from babel.numbers import get_decimal_symbol, get_group_symbol

    code = LANGUAGES[language]
    return text.translate(str.maketrans({",": get_group_symbol(code), ".": get_decimal_symbol(code)}))
