"""One cache kind measured live beside the calculator (`kvlab.size`, every kind for the same tokens), and the
length of the cache each decoding forward received."""

from __future__ import annotations

from matplotlib.figure import Figure

from kvlab.i18n import _, cache_kind_label, number
from kvlab.plots._figure import subplots, tight_layout_fitted
from kvlab.plots.palette import series
from kvlab.units import binary_unit


def plot_cache_choice(
    cache_kind: str,
    live_bytes: int,
    calculated: dict[str, int],
    key_lengths: list[int],
    signatures: tuple[int, int],
    title: str = "",
) -> Figure:
    """`calculated`: each kind's predicted bytes; `live_bytes`: what the `cache_kind` run held; `key_lengths`: the
    cache keys' length at each decoding call (0 = empty residual); `signatures`: (distinct ones, decoding calls)."""
    fig, (bytes_ax, keys_ax) = subplots(1, 2, figsize=(10, 3.8))
    largest = max([live_bytes, *calculated.values()], default=1)
    unit, scale = binary_unit(largest)
    names = list(calculated)
    heights = [calculated[n] / scale for n in names]
    ticks = [cache_kind_label(n) for n in names]  # words in the reader's language; the menu keeps the API values
    bars = bytes_ax.bar(ticks, heights, color=series(0), alpha=0.45, label=_("kvlab.size (calculated)"))
    shown = [number(height, 2, grouping=False) for height in heights]
    bytes_ax.bar_label(bars, labels=shown, fontsize="x-small", label_type="center")  # the live marker sits on top
    live = _("{cache_kind}, live (kvlab.watch)").format(cache_kind=cache_kind_label(cache_kind))
    at = ([names.index(cache_kind)], [live_bytes / scale])
    bytes_ax.plot(*at, "D", color=series(1), markeredgecolor="black", markersize=9, label=live)
    bytes_ax.set_ylabel(_("cache bytes at the end ({unit})").format(unit=unit))
    bytes_ax.set_ylim(0, 1.15 * largest / scale)  # room for the labels
    # the legend under the bars, where it covers neither a bar nor the live marker
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
    shown_kind = cache_kind_label(cache_kind)
    keys_ax.set_title(signatures_title.format(cache_kind=shown_kind, distinct=distinct, total=total), fontsize=10)
    return tight_layout_fitted(fig, grow=True, title=title)
