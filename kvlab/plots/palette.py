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

# Runs and configurations: tab10 without its grey, red and purple, so a series never reads as a state, and two of
# tab20b's darker tones (requests have their own colours, `REQUESTS` below).
SERIES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#e7ba52", "#393b79")


# The requests of a block pool (notebook 12, the explorer's paged runs): eight hues far apart (blue, orange,
# yellow, cyan, magenta, brown, navy, olive), none near the pool's own states (cached purple, free grey) or
# the green of a live slot, so req_5 never passes for req_7 in a timeline of interleaved blocks.
REQUESTS = ("#1f77b4", "#ff7f0e", "#ffe119", "#17becf", "#f032e6", "#8c564b", "#000075", "#808000")


def request(index: int) -> str:
    """The colour of the `index`-th request of a block pool (cycling through `REQUESTS`)."""
    return REQUESTS[index % len(REQUESTS)]


def series(index: int) -> str:
    """The colour of the `index`-th run or configuration (cycling through `SERIES`)."""
    return SERIES[index % len(SERIES)]
