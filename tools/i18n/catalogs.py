"""The gettext bookkeeping of kvlab's messages and the notebooks' text, on top of Babel: an absent file is an empty
catalog, removed messages are dropped rather than kept obsolete, and only a translation that is there and not fuzzy
counts as reviewed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import read_po, write_po

from kvlab.atomic import open_atomic

FIXED_DATE = datetime(2026, 12, 1, tzinfo=UTC)  # the header dates: no churn in diffs, git has the history


def read(path: Path, locale: str, empty: Callable[[], Catalog]) -> Catalog:
    if not path.exists():
        return empty()
    with path.open("rb") as handle:
        return read_po(handle, locale=locale)


def refresh(catalog: Catalog, template: Catalog) -> Catalog:
    """Merge `template` into `catalog`: new messages untranslated, changed ones fuzzy (carrying the old translation
    to start from), removed ones dropped."""
    catalog.update(template)
    catalog.obsolete.clear()
    catalog.fuzzy = False
    catalog.creation_date = catalog.revision_date = FIXED_DATE
    return catalog


def write(catalog: Catalog, path: Path, sort_output: bool, include_lineno: bool) -> None:
    """Atomically: a translator's work is never left half-written by a full disk. `include_lineno=False` for
    source files, where a line number moves with every edit above it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # No previous msgids: at width=0 babel writes them one word per line and reads them back as stray comments; the
    # fuzzy flag and the untouched translation say enough.
    with open_atomic(path, "wb") as handle:
        write_po(
            handle, catalog, width=0, sort_output=sort_output, include_previous=False, include_lineno=include_lineno
        )


def is_reviewed(message: Message | None) -> bool:
    return message is not None and bool(message.string) and not message.fuzzy


def gaps(template: Catalog, catalog: Catalog) -> list[tuple[Message, str]]:
    """(message, "untranslated" or "fuzzy") for each message of `template` without a reviewed translation."""
    entries = [(m, catalog.get(m.id, m.context)) for m in template if m.id]
    return [(m, "fuzzy" if e is not None and e.string else "untranslated") for m, e in entries if not is_reviewed(e)]


def stale(template: Catalog, catalog: Catalog) -> list[Message]:
    """The entries of `catalog` whose message (text and context) `template` no longer has."""
    keys = {(m.id, m.context) for m in template}
    return [m for m in catalog if m.id and (m.id, m.context) not in keys]
