"""The gettext bookkeeping both kinds of catalog share: kvlab's own messages and the notebooks' text.

Babel does the work (reading, merging a new template, writing); this module fixes the few decisions kvlab makes
on top of it, once: an absent file is an empty catalog, removed messages are dropped rather than kept obsolete,
and only a translation that is there and not fuzzy counts as reviewed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import read_po, write_po

from kvlab.atomic import open_atomic

FIXED_DATE = datetime(2026, 12, 1, tzinfo=UTC)  # the header dates: no churn in diffs, git has the history


def read(path: Path, locale: str, empty: Callable[[], Catalog]) -> Catalog:
    """The PO file at `path`; `empty()` when there is none yet (every message then reads as untranslated)."""
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
    """Write the PO file atomically (a translator's work is never left half-written by a full disk).
    `include_lineno=False` for source files: a line number moves with every edit above it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_atomic(path, "wb") as handle:
        write_po(
            handle,
            catalog,
            width=0,
            omit_header=False,
            sort_output=sort_output,
            # babel writes a previous msgid one word per line at width=0, and reads those lines back as stray
            # comments: the fuzzy flag and the untouched translation say enough
            include_previous=False,
            include_lineno=include_lineno,
        )


def is_reviewed(message: Message | None) -> bool:
    return message is not None and bool(message.string) and not message.fuzzy


def gaps(template: Catalog, catalog: Catalog) -> list[tuple[Message, str]]:
    """(source message, "untranslated" or "fuzzy") for each message of `template` without a reviewed translation."""
    found = []
    for message in template:
        if message.id and not is_reviewed(entry := catalog.get(message.id, message.context)):
            found.append((message, "fuzzy" if entry is not None and entry.string else "untranslated"))
    return found


def stale(template: Catalog, catalog: Catalog) -> list[Message]:
    """The entries of `catalog` whose message `template` no longer has (a message is its text and its context)."""
    keys = {(m.id, m.context) for m in template}
    return [m for m in catalog if m.id and (m.id, m.context) not in keys]
