"""Prefix caching per question: tokens each answer prefilled and its time to first token, with and without reuse."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.plots.prefill_bars import plot_prefill_bars


def plot_prefix_answers(runs: dict, title: str = "One prefix, several questions") -> Figure:
    """From `{label: [kvlab.prefix.Answer, ...]}` (same questions in each): prefilled tokens and first-token time."""
    series = {label: [(a.prefilled_tokens, a.first_token_seconds) for a in answers] for label, answers in runs.items()}
    return plot_prefill_bars(series, "question", "copy + prefill: time to first token (ms)", title)
