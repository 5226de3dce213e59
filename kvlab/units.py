"""Bytes in words: the one formatter of a byte count for tables, summaries and plot axes."""

from __future__ import annotations

MIB = 2**20  # figures draw bytes in MiB: one binary unit beside the numbers kvlab prints, never MB (10**6)
BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", MIB), ("KiB", 2**10))


def binary_unit(value: float) -> tuple[str, int]:
    """(unit, bytes in it): the largest binary unit `value` reaches, ("B", 1) below 1 KiB."""
    return next(((unit, scale) for unit, scale in BINARY_UNITS if abs(value) >= scale), ("B", 1))


def human_bytes(value: float, decimals: int = 2, localized: bool = False) -> str:
    """`value` bytes as "512 B", "1,000 B", "1.50 KiB": exact below 1 KiB, then `decimals` digits. `localized`:
    in the marks of the language in use ("1,5 KiB" in pt-BR); else English (command output, read by scripts)."""
    from kvlab.i18n import marks

    write = marks if localized else str
    unit, scale = binary_unit(value)
    if scale == 1:
        return f"{write(f'{value:,.0f}')} B"
    return f"{write(f'{value / scale:.{decimals}f}')} {unit}"
