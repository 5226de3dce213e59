"""What each cache layout reserves for the same requests (`slots_allocated`), and how much holds live tokens.

For a request whose cache ends holding `h` tokens: "static" reserves `max_cache_len` (the longest request the server
accepts) whatever `h` is; "dynamic" exactly `h`; "paged B" ceil(h / B) * B from a shared pool (at most B - 1 slots
of internal fragmentation per request). Slots become bytes with `bytes_per_token` (keys and values, every layer).
"""

from __future__ import annotations

import itertools

from kvlab.caches.options import paged_blocks
from kvlab.i18n import _, cache_kind_label
from kvlab.model_facts import tokens_held
from kvlab.recording.slots import waste_pct

LAYOUTS = ("static", "dynamic", "paged")


def request_lengths(prompt_lengths: list[int], answer_lengths: list[int]) -> list[int]:
    """Tokens each request's cache holds when it finishes."""
    return [tokens_held(p, a) for p, a in zip(prompt_lengths, answer_lengths, strict=True)]


def allocated_slots(
    layout: str, lengths: list[int], *, max_cache_len: int | None = None, block_size: int | None = None
) -> list[int]:
    """Slots each request reserves under `layout` ("static" needs max_cache_len, "paged" block_size)."""
    if layout == "static":
        if max_cache_len is None or max_cache_len < max(lengths, default=0):
            raise ValueError(
                _("static needs max_cache_len >= the longest request ({longest}), got {max_cache_len}").format(
                    longest=max(lengths, default=0), max_cache_len=max_cache_len
                )
            )
        return [max_cache_len] * len(lengths)
    if layout == "dynamic":
        return list(lengths)
    if layout == "paged":
        if block_size is None:
            raise ValueError(_("paged needs block_size"))
        return [paged_blocks(n, block_size) * block_size for n in lengths]
    raise ValueError(
        _("unknown layout {layout!r}; layouts: {layouts}").format(layout=layout, layouts=", ".join(LAYOUTS))
    )


def fits_in_budget(bytes_held: list[int], budget_bytes: int) -> int:
    """How many of the requests (the bytes each holds), admitted in order, fit together in `budget_bytes`."""
    return sum(1 for used in itertools.accumulate(bytes_held) if used <= budget_bytes)  # sizes >= 0: a prefix


def layout_rows(
    lengths: list[int], bytes_per_token: int, *, max_cache_len: int, block_sizes=(16,), budget_bytes: int | None = None
) -> list[dict]:
    """One row per layout (`layout` its key, `name` its words in the reader's language): slots and bytes allocated and
    live, waste %, and the requests that fit in `budget_bytes`."""
    layouts = [("static", {"max_cache_len": max_cache_len}), ("dynamic", {})]
    layouts += [("paged", {"block_size": b}) for b in block_sizes]
    live = sum(lengths)
    rows = []
    for layout, options in layouts:
        allocated = allocated_slots(layout, lengths, **options)
        total = sum(allocated)
        size = f" {options['block_size']}" if layout == "paged" else ""  # "paged 16"
        row = {
            "layout": layout + size,  # the key code looks rows up by, in English in every language
            "name": cache_kind_label(layout) + size,  # the same, in the reader's language
            "requests": len(lengths),
            "slots_allocated": total,
            "slots_live": live,
            "slots_masked": total - live,
            "bytes_held": total * bytes_per_token,
            "bytes_live": live * bytes_per_token,
            "waste_pct": waste_pct(total - live, total, digits=1),
        }
        if budget_bytes is not None:
            row["fit_in_budget"] = fits_in_budget([n * bytes_per_token for n in allocated], budget_bytes)
        rows.append(row)
    return rows
