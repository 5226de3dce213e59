"""A figure as PNG bytes: what an `ipywidgets.Image` shows, in the Cache Explorer and in `kvlab.live` controls.

Here, in plots, so both draw their frames the one way without one importing the other (ARCHITECTURE.md's flow).
The background is opaque white: black text on it reads the same on a light or a dark page.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

FACE = "#ffffff"


def png_bytes(fig: Figure, dpi: int = 80) -> bytes:
    """`fig` rendered to PNG at `dpi`, on the opaque `FACE` background whatever the figure's own facecolor."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, facecolor=FACE, transparent=False)
    return buffer.getvalue()
