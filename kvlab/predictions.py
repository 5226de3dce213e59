"""Scoring a learner's "Predict first" guess against what was measured, each kind of answer on its own scale: a
count is off by so many ("off by 11 tokens", not "+1100 %"), an amount by a share of itself, a percentage by
points; a choice is right or wrong. A notebook is committed with `guess = None`: the question open, the answer
shown."""

from __future__ import annotations

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


def score(guess, measured, *, unit: str = "", kind: str = "amount") -> str:
    """One line comparing `guess` with `measured` (`guess=None`: the open question and the answer), off counted
    by `kind`: "count" (by N), "amount" (by a share of `measured`), "share" (by percentage points), "choice"."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of prediction {kind!r}; kinds: {', '.join(KINDS)}")
    answer = _shown(measured, kind) + unit
    if guess is None:
        open_question = _("no guess yet; measured {answer}. Enter your guess above and run both cells again.")
        return open_question.format(answer=answer)
    shown = _("your guess {guess}; measured {answer}").format(guess=_shown(guess, kind) + unit, answer=answer)
    if kind == "choice" or (kind == "amount" and measured == 0):
        verdict = _("right") if guess == measured else _("wrong")
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
