"""The sequence length of each input of each forward call of a generate(): a traced compiler keys a graph on
input shapes, so a length that changes every call means a new trace every call."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import N_, _
from kvlab.plots._figure import subplots, tight_layout_fitted
from kvlab.plots.palette import series

STYLES = ("o-", "s--", "^:", "d-.", "v-")
DODGE = 0.22  # sideways shift, in calls, between inputs whose points coincide


def plot_forward_shapes(logs: dict, title: str = N_("Forward inputs per call")) -> Figure:
    """From `{label: kvlab.measure.devices.ForwardLog}`: a panel per log, a line per input, the title counting
    the decoding calls' distinct signatures (the prefill, call 0, always has its own). An input keeps its colour
    and style in every panel, so they share one legend, below them. Inputs of the same length at every call (the
    ids and their positions) are drawn side by side, a fraction of a call apart, never one over the other."""
    names = sorted({name for log in logs.values() for name in log.names()})
    fig, axes = subplots(1, len(logs), figsize=(5 * len(logs), 3.9), sharey=True, squeeze=False)
    handles = {}
    for ax, (label, log) in zip(axes[0], logs.items()):
        points = {name: _lengths(log, name) for name in log.names()}
        for name, (calls, lengths) in points.items():
            i = names.index(name)
            # inputs with the same lengths at the same calls would hide each other: each is shifted sideways by
            # a fraction of a call, so every one stays visible beside the others (the calls are whole numbers)
            same = [other for other, drawn in points.items() if drawn == (calls, lengths)]
            shift = (same.index(name) - (len(same) - 1) / 2) * DODGE
            (line,) = ax.plot(
                [call + shift for call in calls], lengths, STYLES[i % len(STYLES)], color=series(i), label=name,
                markersize=6,
            )  # fmt: skip
            handles.setdefault(name, line)
        distinct, calls = log.decoding_signatures()
        signatures = (
            _("{label}: {distinct} distinct signature\nover {calls} decoding calls (prefill not counted)")
            if distinct == 1
            else _("{label}: {distinct} distinct signatures\nover {calls} decoding calls (prefill not counted)")
        )
        ax.set_title(signatures.format(label=label, distinct=distinct, calls=calls), fontsize=10)
        ax.set_xlabel(_("forward call (0 = prefill)"))
        ax.set_ylim(0, 1.1 * max((max(line.get_ydata()) for line in ax.lines), default=1))
    axes[0][0].set_ylabel(_("sequence length of the input"))
    columns = min(len(names), 2 * len(logs))  # two legend entries fit under each 5-inch panel
    rows = -(-len(names) // columns) if names else 0
    entries = [handles[n] for n in names]
    fig.legend(entries, names, loc="lower center", ncol=max(columns, 1), fontsize="small", frameon=False)
    # the bottom strip holds the legend, 7 % a row
    return tight_layout_fitted(fig, rect=(0, 0.07 * rows, 1, 1), grow=True, title=_(title))


def _lengths(log, name: str) -> tuple[list[int], list[int]]:
    """(calls, sequence lengths) of one input: keys are (batch, kv_heads, seq, head_dim); ids, positions and masks
    have the sequence last."""
    records = log.of(name)
    return [r.call for r in records], [r.shape[-2] if name.endswith("keys") else r.shape[-1] for r in records]
