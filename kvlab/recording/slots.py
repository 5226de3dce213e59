"""The slot counts of a trace and the one waste figure derived from them (no torch: `kvlab size` uses it too).

`kvlab.recording.layer_state` defines the counts, per layer: `slots_allocated` (positions with storage), `slots_live`
(positions the next query may attend) and `slots_masked` (allocated, not attendable: allocated - live).
"""

from __future__ import annotations

SLOT_FIELDS = ("slots_allocated", "slots_live", "slots_masked")


def masked_share(total: float, slots_masked: int, slots_allocated: int) -> float:
    """The part of `total` (bytes, or 100 for a percentage) that the masked slots account for; 0 when nothing is
    allocated."""
    return total * slots_masked / slots_allocated if slots_allocated else 0.0


def waste_pct(slots_masked: int, slots_allocated: int, digits: int = 2) -> float:
    """Masked slots as a percentage of allocated slots, rounded to `digits` (a cache's "waste %")."""
    return round(masked_share(100.0, slots_masked, slots_allocated), digits)
