"""Scoring a learner's "Predict first" guess against what was measured, each kind of answer on its own scale: a
count is off by so many ("off by 11 tokens", not "+1100 %"), an amount by a share of itself, a percentage by
points; a choice is right or wrong. A notebook is committed with `guess = None`: the question open and its answer
folded away (a collapsed `<details>` in the rendered notebook), so that a reader opening it on a repository page
cannot read the answer without choosing to."""

from __future__ import annotations

import re
from html import escape

from kvlab.i18n import _, marks

KINDS = ("count", "amount", "share", "choice")


def _shown(value, kind: str) -> str:
    """`value` written for the reader: grouped integers, a few significant digits, a yes/no for booleans."""
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, (int, float)):
        if kind == "count" or float(value).is_integer():
            return marks(f"{round(value):,}")
        return marks(f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}")
    return str(value)


class Score(str):
    """A scored guess, shown by Jupyter (`display(score(...))`). With a guess it is the plain line. Without one its
    text is the open question only, and the measured answer lives in the HTML form alone, inside a collapsed
    `<details>` the reader opens on purpose: the text form is what a plain-text view (or a diff) shows, so it must
    not give the answer away. nbval compares both forms, so the folded answer is still checked."""

    answer: str | None = None

    def __new__(cls, line: str, *, answer: str | None = None, label: str = ""):
        text = f"{label} {line}" if label else line
        made = super().__new__(cls, text)
        made.answer = answer
        made.label = label
        return made

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str | None:
        if self.answer is None:
            return None
        reveal = _("no guess yet: show the measured answer")  # outside the f-string, where Babel can extract it
        summary = f"{self.label} {reveal}".strip()
        return (
            f'<details class="kvlab-answer"><summary>{escape(summary)}</summary><p>{escape(self.answer)}</p></details>'
        )


def score(guess, measured, *, unit: str = "", kind: str = "amount", label: str = "") -> Score:
    """The line comparing `guess` with `measured`, off counted by `kind`: "count" (by N), "amount" (by a share of
    `measured`), "share" (by percentage points), "choice". `guess=None`: the open question, its answer folded.
    `label` names the prediction when a cell scores several."""
    if kind not in KINDS:
        raise ValueError(
            _("unknown kind of prediction {kind!r}; kinds: {kinds}").format(kind=kind, kinds=", ".join(KINDS))
        )
    answer = _shown(measured, kind) + unit
    if guess is None:
        folded = _("measured {answer}. Enter your guess above and run both cells again to see it scored.")
        return Score(
            _("no guess yet: enter your guess above and run both cells again (the answer is folded away)."),
            answer=folded.format(answer=answer),
            label=label,
        )
    return Score(_line(guess, measured, answer, unit, kind), label=label)


def _said_alike(guess, measured) -> bool:
    """A word answer is right however the reader writes it: case, spaces, hyphens, "bits" for "bit", and in the
    reader's language ("rampa" for "ramp", when the catalog translates the measured word)."""
    if not (isinstance(guess, str) and isinstance(measured, str)):
        return guess == measured

    def plain(text: str) -> str:
        words = re.sub(r"[\s_\-]+", " ", text.casefold()).strip()
        return re.sub(r"\bbits\b", "bit", words).replace(" ", "")

    return plain(guess) in {plain(measured), plain(_(measured))}


def _line(guess, measured, answer: str, unit: str, kind: str) -> str:
    shown = _("your guess {guess}; measured {answer}").format(guess=_shown(guess, kind) + unit, answer=answer)
    if kind == "choice" or (kind == "amount" and measured == 0):
        verdict = _("right") if _said_alike(guess, measured) else _("wrong")
        return _("{comparison}: {verdict}").format(comparison=shown, verdict=verdict)
    if kind == "count":
        off = round(guess) - round(measured)
        if off == 0:
            return _("{comparison}: exact").format(comparison=shown)
        direction = _("too many") if off > 0 else _("too few")
        return _("{comparison}: {off} {direction}").format(
            comparison=shown, off=marks(f"{abs(off):,}"), direction=direction
        )
    if kind == "share":
        points = guess - measured
        verdict = _("spot on") if abs(points) < 2 else (_("close") if abs(points) < 10 else _("far off"))
        return _("{comparison}: {points} percentage points ({verdict})").format(
            comparison=shown, points=marks(f"{points:+.1f}"), verdict=verdict
        )
    off = 100.0 * (guess - measured) / measured
    verdict = _("spot on") if abs(off) < 5 else (_("close") if abs(off) < 25 else _("far off"))
    return _("{comparison}: {off}% ({verdict})").format(comparison=shown, off=marks(f"{off:+.0f}"), verdict=verdict)
