"""Every refusal kvlab raises goes through its catalog: no `raise ...Error(f"...")` whose words a Portuguese reader
would meet in English. The package is read as source (no import), so a new raise anywhere in kvlab/ is caught with
its file and line; the scanner itself is tested on a small source it must flag.

Only text with words counts: `f"{head}; {advice}"` joins two messages already translated. A message built in a
variable before the raise is not seen: write it inside the raise, `raise ValueError(_("...").format(...))`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kvlab"

# (file, start of the message as written in the source) -> why it stays English. Each names an error no reader of
# kvlab's output meets: Python's own protocol text, or a misuse only kvlab's own code could commit.
ALLOWED = {
    ("kvlab/_compat.py", "module {__name__!r} has no attribute"): "a module `__getattr__`: Python's own "
    "AttributeError text, read by hasattr() and the import system, not by a person",
    ("kvlab/lazy.py", "module {package!r} has no attribute"): "a module `__getattr__`: Python's own "
    "AttributeError text, read by hasattr() and the import system, not by a person",
    ("kvlab/atomic.py", "open_atomic writes a whole file"): "every caller in kvlab passes a constant mode; a wrong "
    "one is a bug in kvlab, met by its tests",
    ("kvlab/caches/base.py", "{type(self).__name__}: InstrumentedCacheMixin must come"): "the order of base "
    "classes in kvlab's own cache classes, checked when one is built; a bug in kvlab, met by its tests",
}

TRANSLATING = {"_", "C_"}  # the calls that translate where the text is shown (`N_` only marks, it does not)


def _words(text: str) -> bool:
    return re.search(r"[A-Za-z]", text) is not None


def _english(node: ast.expr) -> bool:
    """Whether `node` builds text with English words without translating it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and _words(node.value)
    if isinstance(node, ast.JoinedStr):
        return any(_english(part) for part in node.values if isinstance(part, ast.Constant))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _english(node.left) or _english(node.right)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("format", "join"):
            return _english(func.value)  # "...".format(...), "...".join(...)
        if isinstance(func, ast.Name) and func.id == "N_":
            return any(_english(arg) for arg in node.args)
    return False


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def untranslated_raises(source: str) -> list[tuple[int, str]]:
    """(line, message source) of every exception built with English text outside `_()`: the exception of a
    `raise`, and any `...Error(...)`/`...Exception(...)` call (a helper that returns the error it refuses with)."""
    found = []
    tree = ast.parse(source)
    raised = {id(node.exc) for node in ast.walk(tree) if isinstance(node, ast.Raise) and node.exc is not None}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if id(node) not in raised and not _callee(node).endswith(("Error", "Exception")):
            continue
        if _callee(node) in TRANSLATING:
            continue
        for arg in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if _english(arg):
                found.append((node.lineno, ast.get_source_segment(source, arg) or ""))
    return found


def _message_start(segment: str) -> str:
    """The message as written, without its f/quote prefix: what ALLOWED is keyed by."""
    return re.sub(r"^[(\s]*[rbfu]*['\"]{1,3}", "", segment)


def _findings() -> tuple[list[str], set[tuple[str, str]]]:
    failures, allowed_seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        for line, segment in untranslated_raises(path.read_text(encoding="utf-8")):
            start = _message_start(segment)
            allowed = next((key for key in ALLOWED if key[0] == name and start.startswith(key[1])), None)
            if allowed is not None:
                allowed_seen.add(allowed)
            else:
                failures.append(f"{name}:{line}: {segment[:100]}")
    return failures, allowed_seen


def test_every_raise_message_of_kvlab_goes_through_the_catalog():
    failures, _allowed = _findings()
    assert failures == [], "wrap each in _(...).format(...) and translate it in kvlab.po:\n" + "\n".join(failures)


def test_every_allowed_english_message_is_still_raised():
    """An entry whose raise was removed or translated leaves the list with it."""
    _failures, allowed_seen = _findings()
    assert sorted(set(ALLOWED) - allowed_seen) == []


def test_the_scanner_flags_english_and_passes_translated_messages():
    source = """
def f(x, items):
    if x == 1:
        raise ValueError(f"x must be positive; got {x}")
    if x == 2:
        raise TypeError("no such thing")
    if x == 3:
        raise KeyError("unknown " + repr(x))
    if x == 4:
        raise RuntimeError("bad value %s" % x)
    if x == 5:
        raise ValueError("valid: {}".format(", ".join(items)))
    if x == 6:
        raise ValueError(N_("marked, never translated"))
    if x == 7:
        return CustomError(f"returned to raise elsewhere {x}")
    if x == 8:
        raise ValueError(_("x must be positive; got {x}").format(x=x))
    if x == 9:
        raise ValueError(f"{x}; {items}")
    if x == 10:
        raise ValueError(message)
    if x == 11:
        raise
    print(f"not an error {x}")
"""
    assert [line for line, _segment in untranslated_raises(source)] == [4, 6, 8, 10, 12, 14, 16]
    assert untranslated_raises(source)[0] == (4, 'f"x must be positive; got {x}"')
    assert _message_start('f"x must be positive; got {x}"').startswith("x must be positive; got {x}")


def hidden_from_babel(source: str) -> list[int]:
    """Lines of `_("literal")` written inside an f-string: Python 3.11's tokenizer hands Babel the f-string as one
    token, so the message never reaches the catalog and stays English."""
    return [
        node.lineno
        for joined in ast.walk(ast.parse(source))
        if isinstance(joined, ast.JoinedStr)
        for node in ast.walk(joined)
        if isinstance(node, ast.Call)
        and _callee(node) in TRANSLATING | {"N_"}
        and any(isinstance(arg, ast.Constant) for arg in node.args)
    ]


def test_no_message_is_written_where_babel_cannot_extract_it():
    assert hidden_from_babel('x = f"{label} {_(\'show it\')}"\ny = _("fine")\nz = f"{_(name)}"\n') == [1]
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in hidden_from_babel(path.read_text(encoding="utf-8"))
    ]
    assert found == []
