"""The comments of a notebook's code cells: offered as messages, written back in place, the code left as it was; and
in every built pt-BR notebook, the code cells are the English ones but for their comments and literals."""

from __future__ import annotations

import io
import tokenize

import jupytext
import pytest

from tools.i18n import comments
from tools.i18n import notebooks as i18n

CELL = """\
# NBVAL_CHECK_OUTPUT
%matplotlib inline
!pip install kvlab  # not Python: left alone
# the default: a DynamicCache
guess = None  # bytes per token: your guess
x = "# not a comment"  # noqa: E501
y = 2  # 42
"""


def test_a_cells_comments_are_offered_but_not_its_markers_magic_or_numbers():
    assert [c.message for c in comments.find(CELL)] == ["the default: a DynamicCache", "bytes per token: your guess"]


def test_a_translation_changes_only_the_comment_text():
    words = {
        "the default: a DynamicCache": "o padrão: um DynamicCache",
        "bytes per token: your guess": "bytes por token: seu palpite",
    }
    out = comments.translate(CELL, lambda c: words[c.message])
    lines, english = out.splitlines(), CELL.splitlines()
    assert lines[3] == "# o padrão: um DynamicCache" and lines[4] == "guess = None  # bytes por token: seu palpite"
    assert [line for i, line in enumerate(lines) if i not in (3, 4)] == [
        line for i, line in enumerate(english) if i not in (3, 4)
    ]
    assert comments.translate(CELL, lambda c: c.message) == CELL


def test_a_translation_that_would_break_the_code_is_refused():
    with pytest.raises(ValueError, match="not the same code"):
        comments.translate("x = 1  # one\n", lambda c: "um\ny = 2")


def test_a_missing_comment_translation_fails_the_check(tmp_path):
    english = tmp_path / "01_a_cache.py"
    english.write_text('# %%\nguess = None  # bytes per token: your guess\nprint("x")\n')
    paths = i18n.Paths(english, "pt-BR")
    catalog = i18n.update(paths)
    assert [(m.id, m.context) for m in catalog if m.id] == [("bytes per token: your guess", i18n.COMMENT)]
    assert "untranslated code comment 'bytes per token: your guess'" in " ".join(i18n.problems(paths))
    with pytest.raises(LookupError):
        i18n.build(paths)


def _code_tokens(source: str) -> list[tuple[int, str]]:
    """The tokens a reader's translation may not change: all but comments and strings (translated literals)."""
    masked = comments.MAGIC.sub(r"\1#", source)
    skipped = {tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE}
    return [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(masked).readline) if t.type not in skipped]


@pytest.mark.parametrize("english", i18n.english_scripts(), ids=lambda p: p.stem)
def test_the_portuguese_code_cells_are_the_english_code(english):
    paths = i18n.Paths(english, "pt-BR")
    cells = [[c.source for c in jupytext.read(path).cells if c.cell_type == "code"] for path in (english, paths.script)]
    translated = cells[1][1:]  # after the cell that sets the language
    assert len(cells[0]) == len(translated)
    for source, twin in zip(cells[0], translated):
        assert _code_tokens(twin) == _code_tokens(source)
        assert len(comments.find(twin)) == len(comments.find(source))


def test_a_translation_that_leaves_the_code_untokenizable_is_refused():
    with pytest.raises(ValueError, match="not the same code"):
        comments.translate("x = 1  # one\n", lambda c: "um\n  (")
