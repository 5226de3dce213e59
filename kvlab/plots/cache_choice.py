"""One cache kind, measured live beside the calculator: bytes held (live vs `kvlab.size`, with the other kinds
calculated for the same tokens) and the length of the cache each decoding forward received."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, number
from kvlab.plots._figure import subplots
from kvlab.plots.kv_bytes import unit_for


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
    fig, (bytes_ax, keys_ax) = subplots(1, 2, figsize=(10, 3.4))
    unit, scale = unit_for(max([live_bytes, *calculated.values()], default=1))
    names = list(calculated)
    bars = bytes_ax.bar(
        names, [calculated[n] / scale for n in names], color="#b8c4d6", label=_("kvlab.size (calculated)")
    )
    bytes_ax.bar_label(
        bars, labels=[number(calculated[n] / scale, 2, grouping=False) for n in names], fontsize="x-small", padding=2
    )
    bytes_ax.plot(
        [names.index(cache_kind)],
        [live_bytes / scale],
        "D",
        color="#d1495b",
        markersize=9,
        label=_("{cache_kind}, live (kvlab.watch)").format(cache_kind=cache_kind),
    )
    bytes_ax.set_ylabel(_("cache bytes at the end ({unit})").format(unit=unit))
    bytes_ax.legend(fontsize="small", loc="lower right")
    calls = range(1, len(key_lengths) + 1)
    keys_ax.plot(calls, key_lengths, "o-", color="#4c72b0")
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
    fig.tight_layout()
    return fig
