"""A paged cache's blocks (rows from `kvlab.measure.paged`): who holds which block at every forward; the bytes
each cache layout reserves."""

from __future__ import annotations

import re

import numpy as np
from matplotlib.colors import ListedColormap

from kvlab.i18n import N_, _, number
from kvlab.measure.paged import paged_steps
from kvlab.plots import palette
from kvlab.plots._figure import legend_beside, subplots
from kvlab.recording.trace import Trace
from kvlab.units import binary_unit

FREE, CACHED = -1, -2


def request_order(trace: Trace) -> list[str]:
    """The request ids that were given blocks, in the order of their names, numbers by value (req_2 before req_10):
    the legend reads like the workload, whichever request the scheduler served first."""
    ids = dict.fromkeys(rid for row in paged_steps(trace) for rid in row["block_tables"])
    return sorted(ids, key=lambda rid: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", rid)])


def block_grid(trace: Trace) -> np.ndarray:
    """(num_blocks, forwards) grid, row i = block id trash_blocks + i: the index (in `request_order`) of the request
    holding each block (a shared block: its first holder), FREE for a block in the pool, CACHED for a complete block
    kept only for prefix reuse."""
    rows = paged_steps(trace)
    num_blocks, first = trace.meta["paged"]["num_blocks"], trace.meta["paged"]["trash_blocks"]
    order = {rid: i for i, rid in enumerate(request_order(trace))}
    grid = np.full((num_blocks, len(rows)), FREE, dtype=int)
    for col, row in enumerate(rows):
        for block in row["cached_block_ids"]:
            grid[block - first, col] = CACHED  # block ids start after transformers' two trash sectors
        for rid, blocks in row["block_tables"].items():
            for block in blocks:
                if grid[block - first, col] < 0:
                    grid[block - first, col] = order[rid]
    return grid


def plot_block_timeline(trace: Trace, title: str | None = None):
    """Top: which request holds each block at each forward. Bottom: blocks in use, cached and free per forward,
    with the forwards where a request was refused blocks (it waits) or preempted marked."""
    rows = paged_steps(trace)
    meta = trace.meta["paged"]
    order = request_order(trace)
    grid = block_grid(trace)
    fig, (top, bottom) = subplots(2, 1, figsize=(9, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    # cached and free blocks in their state colours, each request in `request(i)`, so none reads as a state
    cmap = ListedColormap([palette.CACHED, palette.FREE] + [palette.request(i) for i in range(max(len(order), 1))])
    top.imshow(grid + 2, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=len(order) + 1, origin="lower")
    top.set_ylabel(_("block id (of {blocks})").format(blocks=meta["num_blocks"]))
    heading = _("{blocks} blocks of {tokens} tokens: who holds each block")
    top.set_title(title or heading.format(blocks=meta["num_blocks"], tokens=meta["page_size"]))
    for i, rid in enumerate(order):
        top.plot([], [], "s", color=palette.request(i), markersize=9, label=rid)
    top.plot([], [], "s", color=palette.CACHED, markersize=9, label=_("cached"))
    legend_beside(top, fontsize=9, frameon=False, anchor=1.0)
    bottom.stackplot(
        np.arange(len(rows)),
        *([r[f"blocks_{state}"] for r in rows] for state in ("in_use", "cached", "free")),
        labels=[_("in use"), _("cached"), _("free")],
        colors=[palette.LIVE, palette.CACHED, palette.FREE],
        step="mid",
    )
    above = meta["num_blocks"] + 0.5
    for key, marker, label in (("refused", "v", _("request waits")), ("preempted", "x", _("preempted"))):
        forwards = [i for i, r in enumerate(rows) if r[key]]
        if forwards:
            bottom.plot(forwards, [above] * len(forwards), marker, color=palette.ALLOCATED, label=label)
    bottom.set_ylim(0, meta["num_blocks"] + 1.5)
    bottom.set_xlabel(_("forward (one batch step of continuous batching)"))
    bottom.set_ylabel(_("blocks"))
    legend_beside(bottom, fontsize=9, frameon=False, anchor=1.0)
    fig.tight_layout()
    return fig


def plot_layouts(rows: list[dict], title: str = N_("Same requests, every layout: reserved vs live KV bytes")):
    """One bar per layout row (`kvlab.serving.layout_rows`), as high as the bytes it reserves: the part holding
    live tokens under the empty rest."""
    fig, ax = subplots(figsize=(9.5, 3.8))
    x = np.arange(len(rows))
    unit, scale = binary_unit(max((r["bytes_held"] for r in rows), default=0))  # KiB, MiB, GiB: readable ticks
    reserved = [r["bytes_held"] / scale for r in rows]
    live = [r["bytes_live"] / scale for r in rows]
    ax.bar(x, live, 0.6, label=_("holding live tokens"), color=palette.LIVE)
    ax.bar(x, np.subtract(reserved, live), 0.6, bottom=live, label=_("reserved, empty"), color=palette.MASKED)
    for i, r in enumerate(rows):
        waste = _("{percent}% waste").format(percent=number(r["waste_pct"], 1))
        # the share over its words, so neighbouring labels never meet ("74,8% de desperdício" is long)
        ax.text(i, reserved[i], waste.replace(" ", "\n", 1), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [r.get("name", r["layout"]) for r in rows])
    ax.set_ylabel(_("bytes ({unit})").format(unit=unit))
    ax.set_title(_(title))
    ax.set_ylim(0, max(reserved, default=0) * 1.22)  # room for the tallest bar's two-line waste label
    legend_beside(ax, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
