"""The string literals of a notebook's code cells that a reader sees: found, offered as messages, written back
translated, the code otherwise the English code, so the tokens and every number stay the same.

Translated: positional arguments of `print` and `plot_*`, the first of `.set_title`, `.set_xlabel`, `.set_ylabel`,
`.suptitle`, keywords `KEYWORD` names in any call, and run labels (`label_keys`) with every plain string of the
notebook that has their text, so that the code still finds what it stored. Never: other arguments (model names,
options, prompts), raw and bytes literals, a literal without two letters in a row outside its fields.

An f-string, adjacent pieces joined, is one message: its text with braces doubled and each `{...}` field as written,
kept in order by the translation (a quoted-word field, `{'device peak':>12}`, may have its word translated), and
the digits of its text in order. `translate` checks that only these literals' text changed in the syntax tree.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

KEYWORD = re.compile(r"title|suptitle|description|label|xlabel|ylabel|.*_title|.*_label")  # a call's, any call's
FIRST_ARGUMENT_METHODS = frozenset({"set_title", "set_xlabel", "set_ylabel", "suptitle"})
WIDTH = 120  # a translated literal that no longer fits is wrapped into adjacent pieces
MAGIC = re.compile(r"^(\s*)[%!]", re.MULTILINE)  # IPython's %magic and !shell lines: not Python
PIECE = re.compile(r"""(?:\s|#[^\n]*|\\\n)*([A-Za-z]*)('''|\"\"\"|'|")""")  # what may stand before a piece's body
TEXT_FIELD = re.compile(r"""^\{(?P<quote>['"])(?P<text>[^'"\\{}]*)(?P=quote)(?P<rest>(?:![rsa])?(?::[^{}]*)?)\}$""")
LETTERS = re.compile(r"[^\W\d_]{2}")
DIGITS = re.compile(r"\d+")
TEXT = re.compile(r"(?:\\N\{[^}]*\}|\\.|\{\{|\}\}|[^\\{}])+")  # escapes (\N{MINUS SIGN} too), doubled braces
ESCAPES = {i: f"\\x{i:02x}" for i in range(32)} | str.maketrans({"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"})

Parts = list[tuple[str, str]]  # ("text", decoded text) and ("field", "{source}"), in order


@dataclass(frozen=True)
class Literal:
    start: int  # character offsets of the whole literal (every adjacent piece) in the cell's source
    end: int
    column: int  # of its first character, on its first line
    parts: tuple[tuple[str, str], ...]
    fstring: bool  # an f-string (or one piece of it is): the message doubles braces and shows fields
    quote: str  # the quote of its first piece

    @property
    def message(self) -> str:
        escape = _escape_braces if self.fstring else str
        return "".join(escape(value) if kind == "text" else value for kind, value in self.parts)

    @property
    def fields(self) -> list[str]:
        return [value for kind, value in self.parts if kind == "field"]


def find(source: str, labels: frozenset[str] = frozenset()) -> list[Literal]:
    """The translatable literals of a code cell, in source order; `labels` are the notebook's run labels."""
    masked = MAGIC.sub(r"\1#", source)  # same length: offsets into `masked` are offsets into `source`
    lines = masked.splitlines(keepends=True)
    starts = list(itertools.accumulate(map(len, lines), initial=0))

    def offset(lineno: int, byte_column: int) -> int:  # ast counts columns in UTF-8 bytes
        return starts[lineno - 1] + len(lines[lineno - 1].encode()[:byte_column].decode())

    found = []
    for node in _selected(ast.parse(masked), labels):
        start, end = offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)
        pieces = _pieces(masked[start:end])
        if any(set(prefix) & {"r", "b"} for prefix, _q, _b in pieces):
            continue
        parts = _parts(pieces)
        if LETTERS.search("".join(_text_of(kind, value) for kind, value in parts)):
            fstring = any("f" in prefix for prefix, _q, _b in pieces)
            found.append(Literal(start, end, start - starts[node.lineno - 1], tuple(parts), fstring, pieces[0][1]))
    return found


def problems(literal: Literal, translation: str) -> list[str]:
    """What stops `translation` from replacing `literal`: a field missing, added or moved, a different number."""
    try:
        parts = _parse(translation, literal.fstring)
    except ValueError as err:
        return [str(err)]
    found = []
    if [_field_key(f) for f in literal.fields] != [_field_key(v) for k, v in parts if k == "field"]:
        found.append(f"the fields must be {', '.join(literal.fields) or 'none'}, in this order")
    english, translated = ([d for k, v in p for d in DIGITS.findall(_text_of(k, v))] for p in (literal.parts, parts))
    if english != translated:
        found.append(f"the numbers of the text must stay {' '.join(english) or 'none'}")
    return found


def label_keys(sources) -> frozenset[str]:
    """The run labels of a notebook's code cells: plain strings of two or more words that key a dict display or a
    subscript assignment, or are `labels=` items, and are not given to a tokenizer."""
    found: set[str] = set()
    for source in sources:
        tree = ast.parse(MAGIC.sub(r"\1#", source))
        prompts = _model_inputs(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                candidates = node.keys
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                candidates = [node.slice]
            elif isinstance(node, ast.keyword) and node.arg == "labels" and type(node.value) in (ast.Tuple, ast.List):
                candidates = node.value.elts
            else:
                continue
            found.update(c.value for c in candidates if _is_str(c) and id(c) not in prompts and _is_label(c.value))
    return frozenset(found)


def feeds_model(call: ast.Call) -> bool:
    """A call whose string arguments are model input: a tokenizer (`tokenizer(...)`, `tokenizer.encode`), `encode`."""
    name = callee(call)
    owner = call.func.value if isinstance(call.func, ast.Attribute) else None
    tokenizers_method = isinstance(owner, ast.Name) and owner.id.endswith("tokenizer")
    return name.endswith("tokenizer") or name == "encode" or tokenizers_method


def translate(source: str, translation: Callable[[Literal], str], labels: frozenset[str] = frozenset()) -> str:
    """`source` with each literal of `find` replaced by `translation(literal)` (a message in the same form).
    Raises ValueError when a translation does not fit its literal, or the result would not be the same code."""
    edits, translated_labels = [], set(labels)  # after translation, the labels read as translated too
    for literal in find(source, labels):
        text = translation(literal)
        if literal.message in labels and not literal.fstring:
            translated_labels.add(text)
        if text == literal.message:  # the same words (a name, a unit): the English source, as it was laid out
            continue
        if wrong := problems(literal, text):
            raise ValueError(
                "translation of {message!r}: {problems}".format(message=literal.message, problems="; ".join(wrong))
            )
        edits.append((literal, _render(source, literal, _parse(text, literal.fstring))))
    result = source
    for literal, written in reversed(edits):
        result = result[: literal.start] + written + result[literal.end :]
    if _shape(result, frozenset(translated_labels)) != _shape(source, labels):
        raise ValueError("the translated cell is not the same code as the English one")
    return result


# -- finding -----------------------------------------------------------------------------------------------------
def callee(call: ast.Call) -> str:
    """The name a call is made by: `print`, `plot_growth`, `set_title` (of `ax.set_title`); "" for `f()()`."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_str(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_label(text: str) -> bool:
    return " " in text.strip() and bool(LETTERS.search(text))


def _is_string(node) -> bool:
    return isinstance(node, ast.JoinedStr) or _is_str(node)


def _model_inputs(tree) -> set[int]:
    """The ids of every node inside a call that feeds the model: never a label."""
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and feeds_model(c)]
    return {id(n) for call in calls for n in ast.walk(call)}


def _selected(tree, labels: frozenset[str]) -> list[ast.expr]:
    """The literal nodes in a translatable position, in source order, each once."""
    chosen = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = callee(call)
        if name == "print" or name.startswith("plot_"):
            chosen += [a for a in call.args if _is_string(a)]
        elif name in FIRST_ARGUMENT_METHODS and call.args and _is_string(call.args[0]):
            chosen.append(call.args[0])
        chosen += [k.value for k in call.keywords if k.arg and KEYWORD.fullmatch(k.arg) and _is_string(k.value)]
    if labels:  # never model input, nor a piece of an f-string
        fstrings = [f for f in ast.walk(tree) if isinstance(f, ast.JoinedStr)]
        skipped = _model_inputs(tree) | {id(n) for f in fstrings for n in ast.walk(f)}
        chosen += [n for n in ast.walk(tree) if _is_str(n) and n.value in labels and id(n) not in skipped]
    return sorted({id(n): n for n in chosen}.values(), key=lambda n: (n.lineno, n.col_offset))


def _pieces(span: str) -> list[tuple[str, str, str]]:
    """(prefix, quote, body) of each adjacent piece of a literal's source. A piece ends at the first closing quote
    where it parses: Python's own parser decides, in any release's f-string syntax."""
    pieces, i = [], 0
    while match := PIECE.match(span, i):
        prefix, quote = match.groups()
        i = span.index(quote, match.end()) + len(quote)
        while not _parses(span[match.start(1) : i]):
            i = span.index(quote, i) + len(quote)
        pieces.append((prefix.lower(), quote, span[match.end() : i - len(quote)]))
    return pieces


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def _parts(pieces) -> Parts:
    """The decoded text and the fields of the pieces, adjacent texts merged."""
    parts: Parts = []
    for prefix, quote, body in pieces:
        for kind, value in _scan(body) if "f" in prefix else [("text", body)]:
            if kind == "text":
                value = ast.literal_eval(quote + value + quote)
                value = _unescape_braces(value) if "f" in prefix else value
            if kind == "text" and parts and parts[-1][0] == "text":
                parts[-1] = ("text", parts[-1][1] + value)
            elif kind == "field" or value:
                parts.append((kind, value))
    return parts


def _scan(body: str) -> Parts:
    """An f-string's body (or a message in that form) as ("text", raw text) and ("field", "{...}") parts. A field
    ends at the first `}` where Python's parser reads a whole field, however its expression nests."""
    parts: Parts = []
    i = 0
    while i < len(body):
        if text := TEXT.match(body, i):
            parts.append(("text", text.group()))
        elif body[i] == "}":
            raise ValueError(f"a single '}}' at {i}: write '}}}}' for a brace of the text")
        else:
            ends = (j + 1 for j in range(i, len(body)) if body[j] == "}" and _parses(f"f'''{body[i : j + 1]}'''"))
            if (end := next(ends, None)) is None:
                raise ValueError(f"a field opened at {i} is never closed")
            parts.append(("field", body[i:end]))
        i += len(parts[-1][1])
    return parts


def _escape_braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _unescape_braces(text: str) -> str:
    return text.replace("{{", "{").replace("}}", "}")


def _text_of(kind: str, value: str) -> str:
    """What of a part a reader sees as words: its text, or a text field's quoted word."""
    match = TEXT_FIELD.match(value)
    return value if kind == "text" else match.group("text") if match else ""


def _field_key(field: str):
    """What of a field must stay: all of it, or for a quoted word, its quote, conversion and format spec."""
    match = TEXT_FIELD.match(field)
    return ("word", match.group("quote"), match.group("rest")) if match else field


def _parse(message: str, fstring: bool) -> Parts:
    """A translation in the form of its message: decoded text and fields."""
    if not fstring:
        return [("text", message)] if message else []
    return [(kind, _unescape_braces(value) if kind == "text" else value) for kind, value in _scan(message) if value]


# -- writing back ------------------------------------------------------------------------------------------------
def _render(source: str, literal: Literal, parts: Parts) -> str:
    """The translated literal as source: one piece if it fits on its line, else the fewest pieces, one per line
    and as even as they go, aligned under the first (a literal argument is inside parentheses, where they join)."""
    line_end = source.find("\n", literal.end)
    tail = (line_end if line_end >= 0 else len(source)) - literal.end
    one = _piece(parts, literal.quote)
    if literal.column + len(one) + tail <= WIDTH:
        return one
    chunks = _chunks(parts)
    room = WIDTH - literal.column - 3  # 3: the f and the quotes of each piece
    count = len(_fill(chunks, room))
    even = next(r for r in range(-(-_width(sum(chunks, [])) // count), room + 1) if len(_fill(chunks, r)) <= count)
    return ("\n" + " " * literal.column).join(_piece(line, literal.quote) for line in _fill(chunks, max(even, 1)))


def _width(parts: Parts) -> int:
    return sum(len(value) for _kind, value in parts)


def _fill(chunks: list[Parts], room: int) -> list[Parts]:
    """The chunks laid greedily into lines of at most `room` characters (a longer chunk gets a line of its own)."""
    lines: list[Parts] = [[]]
    for chunk in chunks:
        if lines[-1] and _width(lines[-1] + chunk) > room:
            lines.append([])
        lines[-1] += chunk
    return lines


def _chunks(parts: Parts) -> list[Parts]:
    """The parts cut after every run of spaces of their text (never inside a field): where a piece may end."""
    chunks: list[Parts] = [[]]
    for kind, value in parts:
        for word in [value] if kind == "field" else filter(None, re.findall(r"[^ ]* *", value)):
            chunks[-1].append((kind, word))
            if word.endswith(" "):  # a field ends with "}"
                chunks.append([])
    return [c for c in chunks if c]


def _piece(parts: Parts, quote: str) -> str:
    """One string piece holding `parts`: an f-string if it has a field, in `quote` unless a field uses it."""
    fields = [value for kind, value in parts if kind == "field"]
    if len(quote) == 1 and any(quote in f for f in fields):
        quote = "'" if quote == '"' else '"'
    table, escape = ESCAPES | {ord(quote[0]): "\\" + quote[0]}, _escape_braces if fields else str
    body = "".join(escape(value.translate(table)) if kind == "text" else value for kind, value in parts)
    return ("f" if fields else "") + quote + body + quote


class _Blank(ast.NodeTransformer):
    """The literals `find` would offer, with their text removed (their fields kept): what a translation may change."""

    def __init__(self, chosen):
        self.chosen = {id(n) for n in chosen}

    def visit(self, node):
        if id(node) not in self.chosen:
            return super().visit(node)
        values = node.values if isinstance(node, ast.JoinedStr) else []  # f"no field" may come back as "sem campo"
        fields = [v for v in values if isinstance(v, ast.FormattedValue)]
        for field in fields:
            if _is_str(field.value):
                field.value = ast.Constant("")
        return ast.JoinedStr(values=fields)


def _shape(source: str, labels: frozenset[str]) -> str:
    tree = ast.parse(MAGIC.sub(r"\1#", source))
    return ast.dump(_Blank(_selected(tree, labels)).visit(tree))
