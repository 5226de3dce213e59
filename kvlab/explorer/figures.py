"""The explorer's pictures: bytes per layer kind, slots, and a layer × position occupancy map.

Drawn on bare `Figure`s, never pyplot: the generation thread redraws while the main thread serves clicks, and
pyplot's global state is not thread-safe.
"""

from __future__ import annotations

import functools
import textwrap

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import Formatter, MaxNLocator

from kvlab.explorer.kinds import for_trace
from kvlab.explorer.run_values import Run
from kvlab.i18n import N_, _, current_language, layer_kind_label, layer_kind_letter, number
from kvlab.plots import palette
from kvlab.plots._figure import FACE, legend_beside, localise_ticks, png_bytes
from kvlab.plots.growth import bytes_by_layer_kind
from kvlab.recording.trace import Trace
from kvlab.units import binary_unit

CELL_STATES = (
    N_("not allocated"),
    N_("live"),
    N_("masked (allocated, empty)"),
    N_("evicted (seen, dropped)"),
    N_("quantized"),
    N_("residual (full precision)"),
    N_("cropped"),
)
EMPTY, LIVE, MASKED, EVICTED, QUANTIZED, RESIDUAL, CROPPED = range(len(CELL_STATES))
# kvlab's one palette; quantized and its full-precision residual are the explorer's own, in colours nothing else uses.
CELL_COLORS = (FACE, palette.LIVE, palette.MASKED, palette.EVICTED, "#08306b", "#9ecae1", palette.CROPPED)


def occupancy_cells(layer_rows: list[dict], crop: dict | None = None) -> np.ndarray:
    """(layers, positions) grid of CELL_STATES codes from per-layer states (LayerState fields); "cropped" is
    [length after, length before) of `crop`."""
    width = max(
        [r["logical_length"] + r["slots_masked"] for r in layer_rows]
        + [max(crop["lengths_before"], default=0) if crop else 0, 1]
    )
    grid = np.full((len(layer_rows), width), EMPTY, dtype=np.int8)  # (layers, positions)
    for i, r in enumerate(layer_rows):
        length, live = r["logical_length"], r["slots_live"]
        if r.get("quantized_tokens", 0) or r.get("residual_tokens", 0):
            quantized = min(r["quantized_tokens"], length)
            grid[i, :quantized] = QUANTIZED
            grid[i, quantized:length] = RESIDUAL
        else:
            grid[i, : length - live] = EVICTED
            grid[i, length - live : length] = LIVE
            grid[i, length : length + r["slots_masked"]] = MASKED
        if crop and i < len(crop["lengths_after"]):
            grid[i, crop["lengths_after"][i] : crop["lengths_before"][i]] = CROPPED
    return grid


def draw_occupancy(ax, layer_rows: list[dict], crop: dict | None = None, title: str = "") -> None:
    grid = occupancy_cells(layer_rows, crop)
    localise_ticks(ax)  # positions past 999 grouped as the reader writes them: "1.024" in pt-BR
    colors = ListedColormap(CELL_COLORS)
    ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=colors, vmin=0, vmax=len(CELL_STATES) - 1)
    ax.set_xlabel(_("token position"))
    ax.set_ylabel(_("layer"))
    labels = [f"{r['layer_idx']} {layer_kind_letter(r['layer_kind'])}" for r in layer_rows]
    step = max(1, len(labels) // 12)
    ax.set_yticks(range(0, len(labels), step), labels[::step], fontsize=7)
    kinds = dict.fromkeys(r["layer_kind"] for r in layer_rows)  # the kinds present, in layer order
    key = ", ".join(f"{layer_kind_letter(kind)} = {layer_kind_label(kind)}" for kind in kinds)
    ax.set_title(title or _("what each layer holds ({key})").format(key=key), fontsize=10)
    shown = sorted(set(np.unique(grid).tolist()) - {EMPTY})
    handles = [Patch(color=CELL_COLORS[s], label=_(CELL_STATES[s])) for s in shown]
    legend_beside(ax, handles=handles, fontsize=7, frameon=False, anchor=1.0)


COMPARED_WIDTH = 20  # characters of a legend line beside a panel (7 pt, the explorer's 80 dpi): wrapped past it


def compared_label(number: int, label: str, current: tuple[str, Trace] | None, what: str) -> str:
    """A compared run's line in a legend: its row of the table ("[1]"), the run (its label, less the model the
    current run shares: "[1] static (max_cache_len=64)"), and which of its lines; wrapped to the legend's room."""
    model, _sep, rest = label.partition(" · ")
    shared = current is not None and rest and current[0].partition(" · ")[0] == model
    text = _("[{number}] {run}: {what}").format(number=number, run=rest if shared else label, what=what)
    return textwrap.fill(text, COMPARED_WIDTH, break_long_words=False, break_on_hyphens=False)


def _compared_style(n: int, points: int, linestyle: str, marker: str) -> dict:
    """A compared run's line, seen even where the current run's line lies on it: drawn over it, in the run's
    series colour and its own dashes, with hollow markers on a few points."""
    return {
        "color": palette.series(n),
        "linestyle": linestyle,
        "linewidth": 1.6,
        "marker": marker,
        "markersize": 5,
        "markerfacecolor": "none",
        "markevery": max(1, points // 8),
        "zorder": 3,
    }


def draw_bytes(ax, current: tuple[str, Trace] | None, comparison: list[tuple[str, Trace]] = ()) -> None:
    localise_ticks(ax)  # the steps; the bytes get `BinaryBytesFormatter` below
    for n, (run_label, trace) in enumerate(comparison):
        total = trace.bytes_by_step()
        label = compared_label(n + 1, run_label, current, _("total"))
        _line(ax, range(len(total)), total, label=label, **_compared_style(n, len(total), "--", "s"))
    if current is not None:
        series = bytes_by_layer_kind(current[1], x="step")
        for layer_kind, points in series.items():
            color = palette.LAYER_KIND_COLORS.get(layer_kind, palette.ALLOCATED)
            label = _("{layer_kind} layers").format(layer_kind=layer_kind_label(layer_kind, plural=True))
            _line(ax, *zip(*points), color=color, label=label)
        if len(series) > 1:
            total = current[1].bytes_by_step()
            _line(ax, range(len(total)), total, color=palette.ALLOCATED, linewidth=1, label=_("total"))
    ax.yaxis.set_major_locator(BinaryBytesLocator())
    ax.yaxis.set_major_formatter(BinaryBytesFormatter())
    _finish(ax, _("cache bytes"), _("bytes held, per layer kind"))


def draw_slots(ax, current: tuple[str, Trace] | None, comparison: list[tuple[str, Trace]] = ()) -> None:
    localise_ticks(ax)  # steps and slots: "1.024" in pt-BR
    compared = (("slots_allocated", "--", "s", _("allocated")), ("slots_live", ":", "o", _("live")))
    for n, (run_label, trace) in enumerate(comparison):
        rows = trace.slots_by_step()
        for field, linestyle, marker, what in compared:
            label = compared_label(n + 1, run_label, current, what)
            style = _compared_style(n, len(rows), linestyle, marker)
            _line(ax, [r["step"] for r in rows], [r[field] for r in rows], label=label, **style)
    if current is not None:
        rows = current[1].slots_by_step()
        for field, color, label in (
            ("slots_allocated", palette.ALLOCATED, _("allocated")),
            ("slots_live", palette.LIVE, _("live")),
            ("slots_masked", palette.MASKED, _("masked")),
        ):
            _line(ax, [r["step"] for r in rows], [r[field] for r in rows], color=color, label=label)
    _finish(ax, _("slots (all layers)"), _("allocated vs live vs masked slots"))


class BinaryBytesLocator(MaxNLocator):
    """Ticks round in the binary unit the axis top reaches (0, 0.5, 1 MiB), so every KiB/MiB label is exact:
    matplotlib's decimal ticks (1,000,000 B) would read "976.6 KiB"."""

    def __init__(self):
        super().__init__(nbins=6, steps=[1, 2, 5, 10])

    def tick_values(self, vmin, vmax):
        _unit, scale = binary_unit(max(abs(vmin), abs(vmax)))
        return super().tick_values(vmin / scale, vmax / scale) * scale


class BinaryBytesFormatter(Formatter):
    """Every tick in the one binary unit of the largest, with as many decimals as the step needs (0.5 MiB, 1.0 MiB)."""

    unit, scale, decimals = "B", 1, 0

    def set_locs(self, locs):
        super().set_locs(locs)
        # the unit of the view's top, as the locator chose it (a tick just past the top must not change it)
        top = max(abs(v) for v in self.axis.get_view_interval()) if self.axis is not None else max(locs, default=0)
        self.unit, self.scale = binary_unit(top)
        steps = np.diff(np.sort(np.asarray(locs, dtype=float))) / self.scale
        step = float(steps[steps > 0].min()) if (steps > 0).any() else 1.0
        self.decimals = max(0, -int(np.floor(np.log10(step) + 1e-9)))  # 0.5 -> 1, 0.05 -> 2, 20 -> 0

    def __call__(self, value, pos=None) -> str:
        if value == 0:
            return "0 B"
        return f"{number(value / self.scale, self.decimals)} {self.unit}"


def _line(ax, xs, ys, *fmt, **kwargs) -> None:
    """A series as a line, with a dot where it has one point so far (the first live frame, drawn in the prefill)."""
    xs = list(xs)
    ax.plot(xs, list(ys), *fmt, **{**({"marker": "o", "markersize": 4} if len(xs) == 1 else {}), **kwargs})


def _finish(ax, ylabel: str, title: str) -> None:
    """Labels, and the legend beside the axes, never over a line: a live run's lines can pass through any corner."""
    ax.set_xlabel(_("step (0 = prefill)"))
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.set_ylim(bottom=0)
    left, right = ax.get_xlim()
    if right - left < 2:  # one step so far: whole-number steps around it, not ticks at ±0.045
        ax.set_xlim(min(left, -0.5), max(right, 1.5))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ax.get_legend_handles_labels()[0]:
        legend_beside(ax, fontsize=7, frameon=False)


def dashboard(current, layer_rows: list[dict], comparison=(), crop: dict | None = None, status: str = "") -> Figure:
    """The explorer's one picture: bytes and slots per step on top, the occupancy map below; `current` and each of
    `comparison` are (label, trace)."""
    # Fixed margins, not a layout engine: a frame must draw in well under a second (0.15 s vs 0.42 s measured).
    # Its own white face: readable on a dark theme, whatever the user's matplotlib style says.
    fig = Figure(figsize=(11, 6.4), facecolor=FACE)
    grid = fig.add_gridspec(
        2, 2, height_ratios=(1, 1.1), left=0.08, right=0.84, top=0.91, bottom=0.08, hspace=0.38, wspace=0.75
    )  # the wide gap between the top panels holds the left one's legend
    draw_bytes(fig.add_subplot(grid[0, 0]), current, comparison)
    draw_slots(fig.add_subplot(grid[0, 1]), current, comparison)
    occupancy = fig.add_subplot(grid[1, :])
    if layer_rows:
        draw_occupancy(occupancy, layer_rows, crop)
    else:
        occupancy.set_axis_off()
        empty = _("no cache layers yet (cache kind 'none' keeps nothing)") if current else _("press Run")
        occupancy.text(0.5, 0.5, empty, ha="center", va="center", transform=occupancy.transAxes)
    if status:
        fig.suptitle(status, fontsize=10)
    return fig


def picture(run: Run | None, comparison: list[Run], crop: dict | None = None) -> Figure:
    """`run` beside the comparison runs and the last crop: its kind's own picture (paged: the block timeline, the
    comparison runs staying rows of the table), else the dashboard."""
    others = [r for r in comparison if r is not run]
    traces = [(r.label, r.result.trace) for r in others]
    if run is None:
        return dashboard(None, [], traces, crop=crop)
    kind = for_trace(run.trace)
    if kind.figure is not None and run.trace.updates:
        also = " " + _("(comparison runs: rows of the table)") if others else ""
        return kind.figure(run.snapshot(), run.label + also)
    trace = run.snapshot()
    status = _("{label}: {steps} steps").format(label=run.label, steps=trace.summary()["steps"])
    return dashboard((run.label, trace), run.layer_rows(), traces, crop=crop, status=status)


@functools.cache
def _empty_png(language: str) -> bytes:
    return png_bytes(dashboard(None, []))


def empty_png() -> bytes:
    """The picture before any run ("press Run"), drawn once per process and language."""
    return _empty_png(current_language())
