"""Prefix caching per question: tokens each answer prefilled and its time to first token, with and without reuse."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure


def plot_prefix_answers(runs: dict, title: str = "One prefix, several questions") -> Figure:
    """From `{label: [kvlab.prefix.Answer, ...]}` (same questions in each): prefilled tokens and first-token time."""
    with plt.ioff():
        fig, (tokens_ax, time_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    plt.close(fig)  # shown once, by its return value; no pyplot state left open
    width = 0.8 / max(len(runs), 1)
    count = max((len(a) for a in runs.values()), default=0)
    for i, (label, answers) in enumerate(runs.items()):
        x = np.arange(len(answers)) + (i - (len(runs) - 1) / 2) * width
        tokens_ax.bar(x, [a.prefilled_tokens for a in answers], width, label=label)
        time_ax.bar(x, [a.first_token_seconds * 1e3 for a in answers], width, label=label)
    for ax, ylabel in ((tokens_ax, "tokens prefilled"), (time_ax, "copy + prefill: time to first token (ms)")):
        ax.set_xticks(range(count), [f"question {i + 1}" for i in range(count)])
        ax.set_ylabel(ylabel)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
