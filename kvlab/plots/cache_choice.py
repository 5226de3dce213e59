"""One cache kind, measured live beside the calculator: bytes held (live vs `kvlab.size`, with the other kinds
calculated for the same tokens) and the length of the cache each decoding forward received.

Colours are series colours (`kvlab.plots.palette.series`): calculated and live are two series of one quantity, not
slot states, so neither takes the grey of "masked" or the red of "cropped". The legend sits under the bars, where
it can cover neither a bar nor the live marker.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, number
from kvlab.plots._figure import subplots, tight_layout_fitted
from kvlab.plots.kv_bytes import unit_for
from kvlab.plots.palette import series


def plot_cache_choice(
    cache_kind: str,
    live_bytes: int,
    calculated: dict[str, int],
    key_lengths: list[int],
    signatures: tuple[int, int],
    title: str = "",
) -> Figure:
    """`calculated` maps each cache kind to the bytes `kvlab.size` predicts; `live_bytes` is what the `cache_kind` run
    held; `key_lengths` the sequence length of the cache's keys at each decoding call (0 = empty residual);
    `signatures` is (distinct decoding signatures, decoding calls)."""
    fig, (bytes_ax, keys_ax) = subplots(1, 2, figsize=(10, 3.8))
    unit, scale = unit_for(max([live_bytes, *calculated.values()], default=1))
    names = list(calculated)
    bars = bytes_ax.bar(
        names, [calculated[n] / scale for n in names], color=series(0), alpha=0.45, label=_("kvlab.size (calculated)")
    )
    bytes_ax.bar_label(
        bars,
        labels=[number(calculated[n] / scale, 2, grouping=False) for n in names],
        fontsize="x-small",
        label_type="center",  # inside the bar: the live marker sits on its top edge
    )
    bytes_ax.plot(
        [names.index(cache_kind)],
        [live_bytes / scale],
        "D",
        color=series(1),
        markeredgecolor="black",
        markersize=9,
        label=_("{cache_kind}, live (kvlab.watch)").format(cache_kind=cache_kind),
    )
    bytes_ax.set_ylabel(_("cache bytes at the end ({unit})").format(unit=unit))
    bytes_ax.set_ylim(0, 1.15 * max([live_bytes, *calculated.values()], default=1) / scale)  # room for the labels
    bytes_ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    calls = range(1, len(key_lengths) + 1)
    keys_ax.plot(calls, key_lengths, "o-", color=series(1))
    keys_ax.set_xlabel(_("decoding call"))
    keys_ax.set_ylabel(_("cache keys' sequence length"))
    keys_ax.set_ylim(bottom=0)
    distinct, total = signatures
    signatures_title = (
        _("{cache_kind}: {distinct} distinct signature over {total} decoding calls")
        if distinct == 1
        else _("{cache_kind}: {distinct} distinct signatures over {total} decoding calls")
    )
    keys_ax.set_title(signatures_title.format(cache_kind=cache_kind, distinct=distinct, total=total), fontsize=10)
    if title:
        fig.suptitle(title)
    tight_layout_fitted(fig, grow=True)  # a title longer than its panel, a label taller than its axes: wrapped
    return fig
