"""A timing figure carries the verdicts printed beside it ("no cache is 2.37x slower than DynamicCache (2.22-3.17)"):
drawn in a box under the panels, so the picture alone says whether its difference is beyond noise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from kvlab.plots._figure import tight_layout_fitted

LINE_HEIGHT = 1.3  # of the font size
PADDING_IN = 0.18  # the box's padding and the gap under the panels, in inches


def add_verdicts(fig: Figure, verdicts: Sequence[str] | Mapping[str, str], fontsize: float = 8) -> Figure:
    """`fig`, taller by a strip under its panels that holds `verdicts` (one line each, empty ones dropped; a mapping
    {what was compared: verdict} as "what: verdict") in a box; the panels keep their height. Call it last: it lays
    the figure out again."""
    if isinstance(verdicts, Mapping):
        verdicts = [f"{label}: {verdict}" for label, verdict in verdicts.items()]
    lines = [line for line in verdicts if line]
    if not lines:
        return fig
    width, height = fig.get_size_inches()
    strip = len(lines) * fontsize * LINE_HEIGHT / 72 + PADDING_IN
    taller = height + strip
    fig.set_size_inches(width, taller)
    box = {"boxstyle": "round,pad=0.4", "facecolor": "#f5f5f5", "edgecolor": "#bdbdbd"}
    fig.text(0.5, 0.06 / taller, "\n".join(lines), ha="center", va="bottom", fontsize=fontsize, bbox=box)
    tight_layout_fitted(fig, rect=(0, strip / taller, 1, 1))  # a title or label too long for its panel wraps
    return fig
