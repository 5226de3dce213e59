"""The slot counts of a trace and the one waste figure derived from them (no torch: `kvlab size` uses it too)."""

from __future__ import annotations

SLOT_FIELDS = ("slots_allocated", "slots_live", "slots_masked")


def masked_share(total: float, slots_masked: int, slots_allocated: int) -> float:
    """The part of `total` (bytes, or 100 for a percentage) the masked slots account for; 0 if none allocated."""
    return total * slots_masked / slots_allocated if slots_allocated else 0.0


def waste_pct(slots_masked: int, slots_allocated: int, digits: int = 2) -> float:
    """Masked slots as a percentage of allocated slots, rounded to `digits` (a cache's "waste %")."""
    return round(masked_share(100.0, slots_masked, slots_allocated), digits)
