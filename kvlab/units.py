"""Bytes in words: the one formatter of a byte count for tables, summaries and plot axes."""

from __future__ import annotations

BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def binary_unit(value: float) -> tuple[str, int]:
    """(unit, bytes in it): the largest binary unit `value` reaches, ("B", 1) below 1 KiB. The one choice of unit
    for a written byte count (`human_bytes`) and for a bytes axis (the explorer's ticks)."""
    return next(((unit, scale) for unit, scale in BINARY_UNITS if abs(value) >= scale), ("B", 1))


def human_bytes(value: float, decimals: int = 2, localized: bool = False) -> str:
    """`value` bytes in the largest binary unit it reaches: "512 B", "1.50 KiB", "6.99 MiB", "4.15 GiB".

    Below 1 KiB the count is exact ("1,000 B"); above, `decimals` digits follow the point (the `kvlab size` table
    and the bench report use 2; the HTML summary and the explorer's axis ticks use 1). `localized` writes the
    number with the marks of the language in use (`kvlab.set_language`: "1,5 KiB" in Portuguese), for what a
    reader sees in a plot, a widget or the HTML summary; without it (the `kvlab` commands' output, read by
    scripts) the marks are always English. In English both read the same.
    """
    from kvlab.i18n import marks

    write = marks if localized else str
    unit, scale = binary_unit(value)
    if scale == 1:
        return f"{write(f'{value:,.0f}')} B"
    return f"{write(f'{value / scale:.{decimals}f}')} {unit}"
