"""Cache bytes against tokens seen, split by layer kind: where a cache's memory goes as a sequence grows.

Full-attention layers grow by one token's keys and values per step forever; sliding layers stop at their window;
linear-attention layers hold a constant state. Plotting bytes per kind against tokens makes the three shapes
(a ramp, a ramp that flattens, a flat line) visible at a glance.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, number
from kvlab.plots._figure import subplots
from kvlab.plots._snapshots import snapshots, tokens_seen
from kvlab.recording.trace import Trace


def bytes_by_layer_kind(trace: Trace) -> dict[str, list[tuple[int, int]]]:
    """{layer kind: [(tokens seen, bytes held by layers of that kind), ...]} at the end of every step.

    Cross-attention layers are reported under the layer kind "cross".
    """
    series: dict[str, list[tuple[int, int]]] = {}
    for step, layers in snapshots(trace):
        tokens = tokens_seen(layers, trace, step)
        totals: dict[str, int] = {}
        for (role, _layer_idx), event in layers.items():
            layer_kind = "cross" if role == "cross" else event["layer_kind"]
            totals[layer_kind] = totals.get(layer_kind, 0) + event["bytes_held"]
        for layer_kind, total in totals.items():
            series.setdefault(layer_kind, []).append((tokens, total))
    return series


def total_bytes(trace: Trace) -> list[tuple[int, int]]:
    """[(tokens seen, whole-cache bytes), ...] at the end of every step."""
    return [
        (tokens_seen(layers, trace, step), sum(e["bytes_held"] for e in layers.values()))
        for step, layers in snapshots(trace)
    ]


def plot_growth(
    traces: Trace | dict[str, Trace],
    by_layer_kind: bool = True,
    formula_bytes_per_token: float | None = None,
    expected: dict[str, list[tuple[int, int]]] | None = None,
    title: str | None = None,
) -> Figure:
    """Bytes against tokens. One trace: a line per layer kind plus the total (with `by_layer_kind`).

    Several traces (a dict label -> Trace): one total line each, to compare caches. `formula_bytes_per_token`
    adds the dashed line `tokens * bytes_per_token` (the textbook estimate) for comparison. `expected`
    ({label: [(tokens, bytes)]}, e.g. `kvlab.measure.formula.expected_curves`) adds dotted formula curves.
    """
    fig, ax = subplots(figsize=(7, 4))
    named = {_("cache"): traces} if isinstance(traces, Trace) else dict(traces)
    max_tokens = 0
    for label, trace in named.items():
        totals = total_bytes(trace)
        if not totals:
            continue
        max_tokens = max(max_tokens, totals[-1][0])
        xs, ys = zip(*totals)
        split = by_layer_kind and len(named) == 1
        ax.plot(xs, [y / 1e6 for y in ys], label=_("{label}: total").format(label=label) if split else label, lw=2)
        if split:
            kinds = bytes_by_layer_kind(trace)
            if len(kinds) > 1:
                for layer_kind, points in kinds.items():
                    kx, ky = zip(*points)
                    cross = layer_kind == "cross"
                    count = sum(
                        1
                        for e in trace.final_layers()
                        if (e["role"] == "cross") == cross and (cross or e["layer_kind"] == layer_kind)
                    )
                    name = (
                        _("cross-attention")
                        if cross
                        else (
                            _("self-attention ({layer_kind})").format(layer_kind=layer_kind)
                            if "cross" in kinds
                            else layer_kind
                        )
                    )
                    label_kind = _("{count} {name} layers").format(count=count, name=name)
                    ax.plot(kx, [y / 1e6 for y in ky], ls="-", lw=1.2, label=label_kind)
    if formula_bytes_per_token:
        ax.plot(
            [0, max_tokens],
            [0, max_tokens * formula_bytes_per_token / 1e6],
            "k--",
            lw=1,
            label=_("formula: {bytes} B/token").format(bytes=number(formula_bytes_per_token)),
        )
    for label, points in (expected or {}).items():
        ex, ey = zip(*points)
        ax.plot(
            ex, [y / 1e6 for y in ey], ls=":", lw=1.2, color="grey", label=_("formula: {label}").format(label=label)
        )
        ax.annotate(label, (ex[-1], ey[-1] / 1e6), fontsize=7, color="grey", xytext=(2, 0), textcoords="offset points")
    ax.set_xlabel(_("tokens seen (prompt + generated)"))
    ax.set_ylabel(_("cache bytes (MB)"))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or _("KV-cache bytes against tokens"))
    fig.tight_layout()
    return fig
