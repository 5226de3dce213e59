"""The human-readable string literals of a notebook's code cells: found, offered as messages, written back translated.

A translated notebook's code is the English code: the same calls, the same arguments, the same numbers. Only the
text a reader sees changes, and only where it is certain to be such text. A literal is translated when it is

- a positional argument of `print(...)`;
- the value of a keyword argument named `title`, `suptitle`, `description`, `label`, `xlabel` or `ylabel`, or
  of one ending in `_title` or `_label` (`marked_label=`), in any call: plot titles, widget and axis labels;
- the first argument of `.set_title`, `.set_xlabel`, `.set_ylabel` or `.suptitle`;
- a positional argument of a function whose name starts with `plot_` (kvlab's plots take their labels and title
  positionally too: `plot_prefill_bars(data, "turn", "generate time (ms)", title)`).

- a run label: a plain string of words with a space between them that names a run the notebook keeps or shows
  (a key of a dict display, `stages = {"after generate": ...}`; the key of a subscript assignment,
  `stages["4 more tokens"] = ...`; an item of a `labels=` tuple or list) — and then, so that the code still finds
  what it stored, every plain string of the same notebook with the same text, wherever it stands
  (`stages["after generate"]["full"]`, a dropdown's `value=`): one message, one translation (`label_keys` collects
  the labels of a whole notebook, `find(source, labels)` uses them).

Never translated otherwise: dict values, list items, comparisons and subscripts (data the code looks up), any other
argument (`cache_implementation="static"`, `backend="hqq"`, model names, the prompts fed to a model, so that the
tokens and every printed number stay the same), raw and bytes literals, and a literal with no two letters in a row
outside its fields (" B", " %", "…": nothing to translate). A label is never a prompt: a string given to a tokenizer
call is not one.

An f-string is one message, its adjacent pieces (`f"..." f"..."`) joined: the text around the fields in a
translator's own word order, each `{...}` field written exactly as in the code (`{per_token:,}`, `{name:>17}`) and
kept, in the same order, in the translation; braces of the text itself are doubled, as in the f-string. A field
that is only a quoted word (`{'device peak':>12}`, a table header padded to its column) may have its quoted text
translated; its conversion and format spec stay. The digits of the text stay as they are, in order: a checked
cell prints the same numbers in every language.

`translate` checks its own work: the translated cell parses, and its syntax tree is the English one's with only
these literals' text changed.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass

KEYWORDS = frozenset({"title", "suptitle", "description", "label", "xlabel", "ylabel"})
LABELS_KEYWORD = "labels"  # `labels=("deepcopy + generate", ...)`: each item names a run
KEYWORD_SUFFIXES = ("_title", "_label")
FIRST_ARGUMENT_METHODS = frozenset({"set_title", "set_xlabel", "set_ylabel", "suptitle"})
PLOT_PREFIX = "plot_"
WIDTH = 120  # a translated literal that no longer fits is wrapped into adjacent pieces
MAGIC = re.compile(r"^(\s*)[%!]", re.MULTILINE)  # IPython's %magic and !shell lines: not Python
TEXT_FIELD = re.compile(r"""^\{(?P<quote>['"])(?P<text>[^'"\\{}]*)(?P=quote)(?P<rest>(?:![rsa])?(?::[^{}]*)?)\}$""")
LETTERS = re.compile(r"[^\W\d_]{2}")
DIGITS = re.compile(r"\d+")
TEXT = re.compile(r"(?:\\N\{[^}]*\}|\\.|\{\{|\}\}|[^\\{}])+")  # escapes (\N{MINUS SIGN} too), doubled braces


@dataclass(frozen=True)
class Literal:
    """One translatable literal of a cell: where it is, and its message."""

    start: int  # character offsets of the whole literal (every adjacent piece) in the cell's source
    end: int
    column: int  # of its first character, on its first line
    parts: tuple[tuple[str, str], ...]  # ("text", decoded text) and ("field", "{source}") in order
    fstring: bool  # an f-string (or one piece of it is): the message doubles braces and shows fields
    quote: str  # the quote character of its first piece

    @property
    def message(self) -> str:
        """The msgid: the text with each field as written (braces doubled in an f-string's text)."""
        escape = _escape_braces if self.fstring else str
        return "".join(escape(value) if kind == "text" else value for kind, value in self.parts)

    @property
    def fields(self) -> list[str]:
        return [value for kind, value in self.parts if kind == "field"]


def find(source: str, labels: frozenset[str] = frozenset()) -> list[Literal]:
    """The translatable literals of a code cell, in source order (the rules of the module's docstring); `labels`
    are the run labels of the whole notebook (`label_keys`): every plain string with one of their texts is one."""
    masked = MAGIC.sub(r"\1#", source)  # same length: offsets into `masked` are offsets into `source`
    tree = ast.parse(masked)
    offsets = _line_offsets(masked)
    found = []
    for node in _selected(tree, labels):
        start = _offset(masked, offsets, node.lineno, node.col_offset)
        end = _offset(masked, offsets, node.end_lineno, node.end_col_offset)
        pieces = _pieces(masked[start:end])
        if pieces is None:  # a raw or bytes piece: left alone
            continue
        parts, fstring = _parts(pieces)
        if not LETTERS.search("".join(_text_of(kind, value) for kind, value in parts)):
            continue
        column = start - offsets[node.lineno - 1]
        found.append(Literal(start, end, column, tuple(parts), fstring, pieces[0][1]))
    return found


def problems(literal: Literal, translation: str) -> list[str]:
    """What stops `translation` from replacing `literal`: a field missing, added or moved, a different number."""
    try:
        parts = _parse(translation, literal.fstring)
    except ValueError as err:
        return [str(err)]
    found = []
    expected, got = [_field_key(f) for f in literal.fields], [_field_key(v) for k, v in parts if k == "field"]
    if expected != got:
        found.append(f"the fields must be {', '.join(literal.fields) or 'none'}, in this order")
    english = [d for k, v in literal.parts for d in DIGITS.findall(_text_of(k, v))]
    translated = [d for k, v in parts for d in DIGITS.findall(_text_of(k, v))]
    if english != translated:
        found.append(f"the numbers of the text must stay {' '.join(english) or 'none'}")
    return found


def label_keys(sources) -> frozenset[str]:
    """The run labels of a notebook's code cells (`sources`): dict-display keys, keys of subscript assignments and
    `labels=` items that are plain strings of two or more words, not given to a tokenizer."""
    found: set[str] = set()
    for source in sources:
        tree = ast.parse(MAGIC.sub(r"\1#", source))
        prompts = _model_inputs(tree)
        for node in ast.walk(tree):
            candidates: list = []
            if isinstance(node, ast.Dict):
                candidates = [k for k in node.keys if k is not None]
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                candidates = [node.slice]
            elif (
                isinstance(node, ast.keyword)
                and node.arg == LABELS_KEYWORD
                and isinstance(node.value, (ast.Tuple, ast.List))
            ):
                candidates = list(node.value.elts)
            found.update(c.value for c in candidates if id(c) not in prompts and _is_label(c))
    return frozenset(found)


def _is_label(node) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and " " in node.value.strip()
        and bool(LETTERS.search(node.value))
    )


def _model_inputs(tree) -> set[int]:
    """The ids of every node inside a call that feeds the model (`feeds_model`): never a label."""
    return {
        id(n) for call in ast.walk(tree) if isinstance(call, ast.Call) and feeds_model(call) for n in ast.walk(call)
    }


def feeds_model(call: ast.Call) -> bool:
    """A call whose string arguments are model input: a tokenizer (`tokenizer(...)`, `tokenizer.encode`), `encode`."""
    name = callee(call)
    owner = call.func.value if isinstance(call.func, ast.Attribute) else None
    return (
        name.endswith("tokenizer")
        or name == "encode"
        or (isinstance(owner, ast.Name) and owner.id.endswith("tokenizer"))
    )


def translate(source: str, translation: Callable[[Literal], str], labels: frozenset[str] = frozenset()) -> str:
    """`source` with each literal of `find` replaced by `translation(literal)` (a message in the same form).
    Raises ValueError when a translation does not fit its literal, or the result would not be the same code."""
    edits = []
    translated_labels = set(labels)  # what the labels read after translation: the result's own labels
    for literal in find(source, labels):
        text = translation(literal)
        if literal.message in labels and not literal.fstring:
            translated_labels.add(text)
        if text == literal.message:  # the same words (a name, a unit): the English source, as it was laid out
            continue
        if wrong := problems(literal, text):
            raise ValueError(f"translation of {literal.message!r}: {'; '.join(wrong)}")
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


def _is_string(node) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _selected(tree, labels: frozenset[str] = frozenset()) -> list[ast.expr]:
    """The literal nodes in a translatable position, in source order (each once)."""
    chosen = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = callee(call)
        if name == "print" or name.startswith(PLOT_PREFIX):
            chosen += [a for a in call.args if _is_string(a)]
        elif name in FIRST_ARGUMENT_METHODS and call.args and _is_string(call.args[0]):
            chosen.append(call.args[0])
        chosen += [
            k.value
            for k in call.keywords
            if k.arg and (k.arg in KEYWORDS or k.arg.endswith(KEYWORD_SUFFIXES)) and _is_string(k.value)
        ]
    if labels:
        inside_fstrings = {id(n) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for n in ast.walk(f)}
        skipped = _model_inputs(tree) | inside_fstrings  # model input, and the pieces of an f-string
        chosen += [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in labels and id(n) not in skipped
        ]
    unique = {id(n): n for n in chosen}
    return sorted(unique.values(), key=lambda n: (n.lineno, n.col_offset))


def _line_offsets(source: str) -> list[int]:
    offsets, total = [], 0
    for line in source.splitlines(keepends=True):
        offsets.append(total)
        total += len(line)
    return offsets + [total]


def _offset(source: str, offsets: list[int], lineno: int, byte_column: int) -> int:
    """ast's (line, UTF-8 byte column) as a character offset into `source`."""
    start = offsets[lineno - 1]
    line = source[start : offsets[lineno]] if lineno < len(offsets) else source[start:]
    return start + len(line.encode()[:byte_column].decode())


def _pieces(span: str) -> list[tuple[str, str, str]] | None:
    """(prefix, quote, body) of each adjacent string piece of `span`; None if one is raw or bytes. Python's own
    tokenizer finds them: one STRING token each, or on Python 3.12+ an f-string's run from FSTRING_START to END."""
    text = f"({span})"
    offsets, pieces, depth, begin = _line_offsets(text), [], 0, 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        kind = tokenize.tok_name.get(token.type, "")
        if kind == "FSTRING_START":
            depth += 1
            begin = _offset(text, offsets, *token.start) if depth == 1 else begin
        elif kind == "FSTRING_END":
            depth -= 1
            if depth == 0:
                pieces.append(_split_piece(text[begin : _offset(text, offsets, *token.end)]))
        elif token.type == tokenize.STRING and depth == 0:
            pieces.append(_split_piece(token.string))
    return None if any(set(prefix) & {"r", "b"} for prefix, _q, _b in pieces) else pieces


def _split_piece(token: str) -> tuple[str, str, str]:
    prefix = re.match(r"[A-Za-z]*", token).group()
    rest = token[len(prefix) :]
    quote = rest[:3] if rest[:3] in ('"""', "'''") else rest[0]
    return prefix.lower(), quote, rest[len(quote) : -len(quote)]


def _parts(pieces) -> tuple[list[tuple[str, str]], bool]:
    """The decoded text and the fields of the pieces, adjacent texts merged."""
    parts: list[tuple[str, str]] = []
    fstring = any("f" in prefix for prefix, _q, _b in pieces)
    for prefix, quote, body in pieces:
        if "f" not in prefix:
            parts.append(("text", ast.literal_eval(quote + body + quote)))
            continue
        for kind, value in _scan(body):
            decoded = _unescape_braces(ast.literal_eval(quote + value + quote)) if kind == "text" else value
            parts.append((kind, decoded))
    merged: list[tuple[str, str]] = []
    for kind, value in parts:
        if kind == "text" and merged and merged[-1][0] == "text":
            merged[-1] = ("text", merged[-1][1] + value)
        elif kind == "field" or value:
            merged.append((kind, value))
    return merged, fstring


def _scan(body: str) -> list[tuple[str, str]]:
    """An f-string's body (or a message in that form) as ("text", raw text) and ("field", "{...}") parts. The text
    runs to the next field (escapes and doubled braces are text); a field ends at the first `}` where Python's
    own parser reads a whole field, however its expression nests brackets, quotes and f-strings."""
    parts, i = [], 0
    while i < len(body):
        if text := TEXT.match(body, i):
            parts.append(("text", text.group()))
        elif body[i] == "}":
            raise ValueError(f"a single '}}' at {i}: write '}}}}' for a brace of the text")
        else:
            ends = (j + 1 for j in range(i, len(body)) if body[j] == "}" and _is_field(body[i : j + 1]))
            if (end := next(ends, None)) is None:
                raise ValueError(f"a field opened at {i} is never closed")
            parts.append(("field", body[i:end]))
        i += len(parts[-1][1])
    return parts


def _is_field(text: str) -> bool:
    try:
        ast.parse(f"f'''{text}'''")
    except SyntaxError:
        return False
    return True


def _escape_braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _unescape_braces(text: str) -> str:
    return text.replace("{{", "{").replace("}}", "}")


def _text_of(kind: str, value: str) -> str:
    """What of a part a reader sees as words: its text, or a text field's quoted word."""
    if kind == "text":
        return value
    match = TEXT_FIELD.match(value)
    return match.group("text") if match else ""


def _field_key(field: str):
    """What of a field must stay: all of it, or for a quoted word, its quote, conversion and format spec."""
    match = TEXT_FIELD.match(field)
    return ("word", match.group("quote"), match.group("rest")) if match else field


def _parse(message: str, fstring: bool) -> list[tuple[str, str]]:
    """A translation in the form of its message: decoded text and fields."""
    if not fstring:
        return [("text", message)] if message else []
    return [(kind, _unescape_braces(value) if kind == "text" else value) for kind, value in _scan(message) if value]


# -- writing back ------------------------------------------------------------------------------------------------
def _render(source: str, literal: Literal, parts: list[tuple[str, str]]) -> str:
    """The translated literal as source: one piece if it fits on its line, else pieces one per line, aligned under
    the first (a literal argument is inside a call's parentheses, where adjacent pieces join)."""
    line_end = source.find("\n", literal.end)
    tail = (line_end if line_end >= 0 else len(source)) - literal.end
    one = _piece(parts, literal.quote)
    if literal.column + len(one) + tail <= WIDTH:
        return one
    chunks = _chunks(parts)
    room = WIDTH - literal.column - 3  # 3: the f and the quotes of each piece
    count = len(_fill(chunks, room))
    even = next(r for r in range(-(-_width(sum(chunks, [])) // count), room + 1) if len(_fill(chunks, r)) <= count)
    lines = _fill(chunks, max(even, 1))  # the fewest lines, as even as they go: no word left alone on the last
    return ("\n" + " " * literal.column).join(_piece(line, literal.quote) for line in lines)


def _width(parts: list[tuple[str, str]]) -> int:
    return sum(len(value) for _kind, value in parts)


def _fill(chunks: list[list[tuple[str, str]]], room: int) -> list[list[tuple[str, str]]]:
    """The chunks laid greedily into lines of at most `room` characters (a longer chunk gets a line of its own)."""
    lines, current = [], []
    for chunk in chunks:
        if current and _width(current + chunk) > room:
            lines.append(current)
            current = []
        current += chunk
    return lines + [current]


def _chunks(parts: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The parts cut after every space of their text (never inside a field): the places a piece may end."""
    chunks: list[list[tuple[str, str]]] = [[]]
    for kind, value in parts:
        if kind == "field":
            chunks[-1].append((kind, value))
            continue
        for word in re.findall(r"[^ ]* *|[^ ]+$", value):
            if word:
                chunks[-1].append(("text", word))
                if word.endswith(" "):
                    chunks.append([])
    return [c for c in chunks if c]


def _piece(parts: list[tuple[str, str]], quote: str) -> str:
    """One string piece holding `parts`: an f-string if it has a field, in `quote` unless a field uses it."""
    fields = [value for kind, value in parts if kind == "field"]
    if len(quote) == 1 and any(quote in f for f in fields):
        quote = "'" if quote == '"' else '"'
    body = "".join(_escape(value, quote, bool(fields)) if kind == "text" else value for kind, value in parts)
    return ("f" if fields else "") + quote + body + quote


def _escape(text: str, quote: str, fstring: bool) -> str:
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == quote[0]:
            out.append("\\" + char)
        elif char in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[char])
        elif ord(char) < 32:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    written = "".join(out)
    return _escape_braces(written) if fstring else written


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
            if isinstance(field.value, ast.Constant) and isinstance(field.value.value, str):
                field.value = ast.Constant("")
        return ast.JoinedStr(values=fields)


def _shape(source: str, labels: frozenset[str] = frozenset()) -> str:
    tree = ast.parse(MAGIC.sub(r"\1#", source))
    return ast.dump(_Blank(_selected(tree, labels)).visit(tree))
