"""Cache bytes against tokens seen, split by layer kind: full layers ramp, sliding layers flatten at their window,
linear layers hold a constant state."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, layer_kind_label, number
from kvlab.plots._figure import finish_beside, localise_ticks, subplots
from kvlab.plots.palette import ALLOCATED, LAYER_KIND_COLORS, series
from kvlab.recording.trace import Trace
from kvlab.units import binary_unit


def snapshots(trace: Trace) -> list[tuple[int, dict[tuple[str, int], dict]]]:
    """[(step, {(role, layer_idx): last update event so far}), ...] in step order: what the whole cache holds after
    each step, a layer not updated at a step (a linear layer, a cross-attention layer after prefill) keeping its
    state."""
    current: dict[tuple[str, int], dict] = {}
    out: list[tuple[int, dict]] = []
    step = None
    for event in trace.updates:  # steps only increase along a trace
        if step is not None and event["step"] != step:
            out.append((step, dict(current)))
        step = event["step"]
        current[(event["role"], event["layer_idx"])] = event
    if step is not None:
        out.append((step, dict(current)))
    return out


def tokens_seen(layers: dict[tuple[str, int], dict], trace: Trace | None = None, step: int = 0) -> int:
    """The longest logical length among the self-attention layers; for a model of linear layers only (Mamba, no
    per-token length), the `trace`'s prompt length plus one token per decode step."""
    lengths = [e["logical_length"] for (role, _), e in layers.items() if role == "self"]
    seen = max(lengths, default=0)
    if seen == 0 and trace is not None and trace.meta.get("prompt_tokens"):
        return int(trace.meta["prompt_tokens"]) + step
    return seen


def bytes_by_layer_kind(trace: Trace, x: str = "tokens") -> dict[str, list[tuple[int, int]]]:
    """{layer kind, or "cross" for cross-attention: [(x, bytes held by its layers)]} after every step, where x is
    the tokens seen (`x="tokens"`, what a reader compares across runs) or the step (`x="step"`, the explorer's axis,
    shared with `Trace.bytes_by_step`)."""
    if x not in ("tokens", "step"):
        raise ValueError(_("x must be 'tokens' or 'step'; got {x!r}").format(x=x))
    series: dict[str, list[tuple[int, int]]] = {}
    for step, layers in snapshots(trace):
        tokens = tokens_seen(layers, trace, step) if x == "tokens" else step
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
    zoom: bool = False,
    title: str | None = None,
) -> Figure:
    """Bytes against tokens: for one trace the total and (`by_layer_kind`) a line per layer kind; for a dict of
    traces a total each. `formula_bytes_per_token` adds the dashed textbook line; `expected` ({label: [(tokens,
    bytes)]}, `kvlab.measure.formula.expected_curves`) dotted curves in the colour of the line each predicts.
    `zoom` adds an inset of the totals at their own scale: a prefill peak of a few hundred KiB is a few pixels.
    Bytes are drawn in the binary unit the largest reaches (`kvlab.units.binary_unit`): KiB for a tiny model's
    tens of thousands, MiB or GiB for a real one's."""
    fig, ax = subplots(figsize=(9, 4))
    named = {_("cache"): traces} if isinstance(traces, Trace) else dict(traces)
    unit, scale = binary_unit(_largest(named, formula_bytes_per_token, expected))
    max_tokens = 0
    measured_totals: list[tuple[str, list[tuple[int, int]]]] = []
    kind_colors: dict[str, str] = {"total": ALLOCATED}
    for index, (label, trace) in enumerate(named.items()):
        totals = total_bytes(trace)
        if not totals:
            continue
        max_tokens = max(max_tokens, totals[-1][0])
        xs, ys = zip(*totals)
        split = by_layer_kind and len(named) == 1
        color = ALLOCATED if len(named) == 1 else series(index)
        measured_totals.append((color, totals))
        name = _("{label}: total").format(label=label) if split else label
        ax.plot(xs, [y / scale for y in ys], label=name, lw=2, color=color)
        if split:
            _kind_lines(ax, trace, kind_colors, scale)
    if formula_bytes_per_token:
        formula = _("formula: {bytes} B/token").format(bytes=number(formula_bytes_per_token))
        end = max_tokens * formula_bytes_per_token / scale
        ax.plot([0, max_tokens], [0, end], ls="--", color=ALLOCATED, lw=1, label=formula)
    for label, points in (expected or {}).items():
        ex, ey = zip(*points)
        color = kind_colors.get(label, ALLOCATED)
        shown = _("total") if label == "total" else layer_kind_label(label)  # a key of `expected_curves`, in words
        ax.plot(
            ex, [y / scale for y in ey], ls=":", lw=1.2, color=color, label=_("formula: {label}").format(label=shown)
        )
        ax.annotate(shown, (ex[-1], ey[-1] / scale), fontsize=7, color=color, xytext=(2, 0), textcoords="offset points")
    decoder = any(e["role"] == "cross" for trace in named.values() for e in trace.final_layers())
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if zoom and measured_totals:
        _zoom_inset(ax, measured_totals, (expected or {}).get("total"))
    tokens = _("decoder tokens seen (start token + generated)") if decoder else _("tokens seen (prompt + generated)")
    ylabel = _("cache bytes ({unit})").format(unit=unit)
    return finish_beside(fig, ax, title or _("KV-cache bytes against tokens"), tokens, ylabel)


def _largest(named: dict[str, Trace], formula_bytes_per_token, expected) -> float:
    """The most bytes any line of `plot_growth` reaches: a total, the formula's at the last token, a curve of
    `expected`. A layer kind's line stays under its total."""
    totals = [total_bytes(trace) for trace in named.values()]
    measured = [b for points in totals for _t, b in points]
    most_tokens = max((t for points in totals for t, _b in points), default=0)
    formula = [most_tokens * formula_bytes_per_token] if formula_bytes_per_token else []
    curves = [b for points in (expected or {}).values() for _t, b in points]
    return max([*measured, *formula, *curves], default=0)


def _kind_lines(ax, trace: Trace, kind_colors: dict[str, str], scale: int) -> None:
    """A line per layer kind (none for a single kind), labelled with its count of layers, its colour put in
    `kind_colors`. Cross-attention takes the pink series colour: the farthest from every layer kind's."""
    kinds = bytes_by_layer_kind(trace)
    for kind_index, (layer_kind, points) in enumerate(kinds.items() if len(kinds) > 1 else []):
        kx, ky = zip(*points)
        cross = layer_kind == "cross"
        layers = trace.final_layers()
        count = sum(1 for e in layers if (e["role"] == "cross") == cross and (cross or e["layer_kind"] == layer_kind))
        if cross:
            name = _("cross-attention")
        elif "cross" in kinds:
            name = _("self-attention ({layer_kind})").format(layer_kind=layer_kind_label(layer_kind))
        else:  # agreeing with "layers": "12 camadas (deslizantes)"
            name = layer_kind_label(layer_kind, plural=True)
        kind_colors[layer_kind] = series(5) if cross else LAYER_KIND_COLORS.get(layer_kind, series(kind_index))
        label = _("{count} {name} layers").format(count=count, name=name)
        ax.plot(kx, [y / scale for y in ky], ls="-", lw=1.2, label=label, color=kind_colors[layer_kind])


def _zoom_inset(ax, measured_totals: list[tuple[str, list[tuple[int, int]]]], expected_total) -> None:
    """An inset in the empty upper left: the measured totals, and the formula's over the same tokens, at a y
    scale set by the measured bytes alone, in the binary unit they reach (its own: the main axis's may be larger)."""
    inset = localise_ticks(ax.inset_axes([0.07, 0.55, 0.36, 0.37]))  # made outside `subplots`: its own call
    low = min(t for _color, totals in measured_totals for t, _b in totals)
    high = max(t for _color, totals in measured_totals for t, _b in totals)
    near = [(t, b) for t, b in expected_total or [] if low <= t <= high]
    unit, scale = binary_unit(max(b for _color, totals in measured_totals for _t, b in totals))
    for color, totals in measured_totals:
        xs, ys = zip(*totals)
        inset.plot(xs, [y / scale for y in ys], ".-", lw=1.5, ms=3, color=color)
    if near:
        ex, ey = zip(*near)
        inset.plot(ex, [y / scale for y in ey], ls=":", lw=1.2, color=ALLOCATED)
    inset.set_title(_("total ({unit}), zoomed on the measured tokens").format(unit=unit), fontsize=7)
    inset.tick_params(labelsize=7)
    inset.grid(alpha=0.3)
    inset.margins(x=0.05, y=0.15)
