"""kvlab's own words in the reader's language: `kvlab.set_language("pt-BR")`, or KVLAB_LANG, or the locale.

English is the source text and the message id; translations live in gettext catalogs (`kvlab/locale/<locale>/
LC_MESSAGES/kvlab.po`), read with Babel when a language first needs them, so `import kvlab` stays light. A message
without a translation stays English: a gap, not an error (the tests list every gap). Numbers are written one way per
language by `number` and `percent`, also behind kvlab's figure ticks, so they read the same in text and on an axis.
"""

from __future__ import annotations

import contextlib
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
    None goes back to the default. Returns nothing: a quiet first line of a notebook."""
    global _chosen
    if language is not None and _spoken(language) is None:
        raise ValueError(
            _("unknown language {language!r}; kvlab speaks {languages}").format(
                language=language, languages=", ".join(LANGUAGES)
            )
        )
    _chosen = _spoken(language)


def current_language() -> str:
    """The language set by `set_language`, else KVLAB_LANG, else the process locale when kvlab speaks it."""
    if _chosen is not None:
        return _chosen
    for variable in ("KVLAB_LANG", "LC_ALL", "LANG"):
        if language := _spoken(os.environ.get(variable, "").split(".")[0]):  # "pt_BR.UTF-8" -> "pt-BR"
            return language
    with contextlib.suppress(ValueError):
        return _spoken(_locale.getlocale()[0]) or "en"
    return "en"


def catalog_path(language: str) -> Path:
    return LOCALE_DIR / LANGUAGES[language] / "LC_MESSAGES" / "kvlab.po"


@functools.cache
def _catalog(language: str) -> dict[str | tuple[str, str], str]:
    """msgid (or (msgctxt, msgid)) -> translation, reviewed entries only (translated, not fuzzy). Read here with
    Babel's reader alone: every module of kvlab may raise through `_`, so this one imports no other of kvlab."""
    path = catalog_path(language)
    if language == "en" or not path.exists():
        return {}
    from babel.messages.pofile import read_po

    with path.open("rb") as handle:
        catalog = read_po(handle, locale=LANGUAGES[language])
    return {(m.context, m.id) if m.context else m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


def _(message: str) -> str:
    """`message` in the current language (the English text when it has no translation)."""
    return _catalog(current_language()).get(message, message)


def C_(context: str, message: str) -> str:
    """`message` read in `context` (gettext's msgctxt): one English word, two meanings, e.g. "full" of a layer."""
    return _catalog(current_language()).get((context, message), message)


def N_(message: str) -> str:
    """`message` unchanged, marked for the catalog: English kept in a constant, translated with `_()` where shown."""
    return message


def layer_kind_label(kind: str, plural: bool = False) -> str:
    """A layer kind as a reader reads it: "sliding" in English, "deslizante" ("deslizantes" with `plural`, agreeing
    with "camadas") in Portuguese. A kind without a word here is shown as recorded."""
    words = {  # (singular, plural): each a literal for Babel's extraction
        "full": (C_("layer kind", "full"), C_("layer kinds", "full")),
        "sliding": (C_("layer kind", "sliding"), C_("layer kinds", "sliding")),
        "chunked": (C_("layer kind", "chunked"), C_("layer kinds", "chunked")),
        "linear": (C_("layer kind", "linear"), C_("layer kinds", "linear")),
    }
    return words[kind][plural] if kind in words else kind


def layer_kind_letter(kind: str) -> str:
    """The one letter a crowded axis shows for a layer kind: "s" for sliding, "d" for deslizante, "b" for "em
    blocos" (the last word's first letter); the figure's title spells the letters out."""
    return layer_kind_label(kind).split()[-1][0]


def cache_kind_label(kind: str) -> str:
    """A cache kind as a word in a sentence or label ("um cache estático"); where the reader types the kind
    (`cache_implementation="static"`, a menu value) it stays the API value and this is not used."""
    words = {
        "dynamic": C_("cache kind", "dynamic"),
        "static": C_("cache kind", "static"),
        "offloaded": C_("cache kind", "offloaded"),
        "offloaded_static": C_("cache kind", "offloaded_static"),
        "quantized": C_("cache kind", "quantized"),
        "paged": C_("cache kind", "paged"),
    }
    return words.get(kind, kind)


def attention_role_label(role: str) -> str:
    """An encoder-decoder layer's role as a reader reads it: "self" / "cross" in English (as recorded),
    "autoatenção" / "atenção cruzada" in Portuguese. A role without a word here is shown as recorded."""
    words = {"self": C_("attention role", "self"), "cross": C_("attention role", "cross")}
    return words.get(role, role)


def number(value: float, decimals: int = 0, grouping: bool = True) -> str:
    """7,326,720.5 / 7.326.720,5: rounded as Python's format rounds, in English exactly `f"{value:,.{decimals}f}"`."""
    return marks(f"{value:{',' if grouping else ''}.{decimals}f}")


def percent(value: float, decimals: int = 1) -> str:
    """A share already in percent, "%" right after the number in both languages (the style of both languages' press,
    one form everywhere): "84.38%" / "84,38%" (`percent(84.375, 2)`)."""
    return f"{number(value, decimals, grouping=True)}%"


def marks(text: str) -> str:
    """A number Python formatted (`f"{x:,}"`) with the current language's marks: "1,234.5" -> "1.234,5" in pt-BR."""
    language = current_language()
    if language == "en":
        return text
    from babel.numbers import get_decimal_symbol, get_group_symbol

    code = LANGUAGES[language]
    return text.translate(str.maketrans({",": get_group_symbol(code), ".": get_decimal_symbol(code)}))
