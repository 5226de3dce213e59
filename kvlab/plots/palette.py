"""kvlab's colours, one meaning each, in every picture it draws: a reader who learns that grey means "masked"
must not meet grey as a request, or red as "masked", in the next figure."""

from __future__ import annotations

LAYER_KIND_COLORS = {
    "full": "#2b8cbe",
    "sliding": "#e6550d",
    "chunked": "#31a354",
    "linear": "#756bb1",
    "dummy": "#999999",
}

# What a slot (a token position a layer has storage for) is doing, and what happened to a token.
LIVE = "#4c9a5f"  # attendable now
MASKED = "#bdbdbd"  # allocated, still empty: the static cache's waste
FREE = "#eeeeee"  # not allocated to anyone (a block pool's free blocks)
ALLOCATED = "#000000"  # the line on top: everything allocated
EVICTED = "#fdae6b"  # seen and dropped by a sliding window
CROPPED = "#de2d26"  # removed by crop / rejected by a draft check
CACHED = "#6a51a3"  # kept for reuse (a shared prefix, a cached block)

# Runs, requests and configurations: tab10 without its grey, red and purple, so a series never reads as a state,
# and two of tab20b's darker tones, so the eight requests of notebook 12 get eight colours before any repeats.
SERIES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#e7ba52", "#393b79")


def series(index: int) -> str:
    """The colour of the `index`-th run or request (cycling through `SERIES`)."""
    return SERIES[index % len(SERIES)]
