"""The comments of a notebook's code cells: a reader of the translated notebook reads them as prose, so each one
is a message, written back in place with only its text changed; the code and its lines stay the English ones.

Not offered: jupytext and nbval markers (`# %%`, `# +`, `# -`, `# NBVAL_...`), lint pragmas (`# noqa`,
`# type:`), IPython's %magic and !shell lines, and a comment without two letters in a row.
"""

from __future__ import annotations

import io
import itertools
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass

from tools.i18n.literals import LETTERS, MAGIC

MARKER = re.compile(r"#\s*(%%|\+\s*$|-\s*$|NBVAL_|noqa|type:|fmt:|pragma)")
LEAD = re.compile(r"#+\s*")  # the hashes and spaces before a comment's text: kept as written


@dataclass(frozen=True)
class Comment:
    start: int  # character offsets of its text (after "# ") in the cell's source, to the end of its line
    end: int
    message: str


def find(source: str) -> list[Comment]:
    """The translatable comments of a code cell, in source order."""
    masked = MAGIC.sub(r"\1#", source)  # same length: a magic line reads as a comment, skipped below
    lines = masked.splitlines(keepends=True)
    starts = list(itertools.accumulate(map(len, lines), initial=0))
    found = []
    for token in _tokens(masked):
        if token.type != tokenize.COMMENT or MARKER.match(token.string):
            continue
        start = starts[token.start[0] - 1] + token.start[1]  # tokenize counts columns in characters
        if source[start] != "#":  # a %magic or !shell line
            continue
        lead = LEAD.match(token.string).end()
        text = token.string[lead:].rstrip()
        if LETTERS.search(text):
            found.append(Comment(start + lead, start + lead + len(text), text))
    return found


def translate(source: str, translation: Callable[[Comment], str]) -> str:
    """`source` with each comment of `find` replaced by `translation(comment)`. Raises ValueError when the result
    would not be the same code (a translation that spans lines moves every token below it)."""
    result = source
    for comment in reversed(find(source)):
        text = translation(comment)
        result = result[: comment.start] + text + result[comment.end :]
    if not _tokenizes(result) or _code(result) != _code(source):
        raise ValueError("the translated cell is not the same code as the English one")
    return result


def _tokenizes(source: str) -> bool:
    try:
        _tokens(MAGIC.sub(r"\1#", source))
    except (tokenize.TokenError, SyntaxError):
        return False
    return True


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _code(source: str) -> list[tuple]:
    """Every token but the comments, with its place: what a translated comment must leave as it was."""
    masked = MAGIC.sub(r"\1#", source)
    ends = (tokenize.NL, tokenize.NEWLINE)  # they start where a comment ends: their place moves with its length
    return [
        (t.type, t.string, t.start[0] if t.type in ends else t.start)
        for t in _tokens(masked)
        if t.type != tokenize.COMMENT
    ]
