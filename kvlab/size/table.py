"""One row per cache kind (and per quantization backend and bit width) for an architecture: `kvlab size`."""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.options import CacheOptionError, check_page_size, check_paged_layers, paged_blocks
from kvlab.i18n import _
from kvlab.quantized_backends import QUANTIZED_OPTIONS, table_rows
from kvlab.recording.slots import waste_pct
from kvlab.size.architecture import Architecture
from kvlab.size.calculator import cache_size
from kvlab.units import human_bytes


def size_rows(
    arch: Architecture,
    tokens: int,
    *,
    page_size: int | None = None,
    lengths: list[int] | None = None,
    **sizing,
) -> list[dict]:
    """Every cache kind's size as dicts: label, cache_kind, options, bytes, peak_bytes, ... or `unsupported`.

    `sizing`: `cache_size`'s batch, dtype, prefill and source_tokens, and the options of the rows that take them:
    max_cache_len (default `tokens`), and the quantized rows' choice: `backend` and `nbits` pick the rows (default:
    every backend at every width it takes), the other quantized options go to each backend that takes them
    (`kvlab.quantized_backends.table_rows`). With `page_size`, a last row gives the paged layout
    (`model.generate_batch`) for `lengths` (tokens each request holds; default: `batch` x `tokens`).
    """
    length = {"max_cache_len": sizing.pop("max_cache_len", None) or tokens}
    chosen = {k: v for k in ("backend", *QUANTIZED_OPTIONS) if (v := sizing.pop(k, None)) is not None}
    specs = [
        ("dynamic", "dynamic", {}),
        (f"static (max_cache_len {length['max_cache_len']})", "static", length),
        ("offloaded", "offloaded", {}),
        ("offloaded_static", "offloaded_static", length),
    ]
    specs += [(label, "quantized", options) for label, options in table_rows(lambda row: row.nbits, **chosen)]
    if page_size is not None:
        specs.append((f"paged (page_size {page_size})", "paged", {"page_size": page_size}))
    rows = []
    for label, cache_kind, options in specs:
        try:
            if cache_kind == "paged":
                batch, dtype = sizing.get("batch", 1), sizing.get("dtype", "float32")
                rows.append(paged_row(arch, lengths or [tokens] * batch, page_size, dtype))
            else:
                rows.append({"label": label, **cache_size(arch, cache_kind, tokens, **sizing, **options).to_dict()})
        except CacheOptionError as err:
            rows.append({"label": label, "cache_kind": cache_kind, "options": options, "unsupported": str(err)})
    return rows


def paged_row(arch: Architecture, lengths: list[int], page_size: int | None = None, dtype: str = "float32") -> dict:
    """A `kvlab size` row for requests that hold `lengths` tokens each, in blocks of `page_size` slots: the paged
    layout of continuous batching (`model.generate_batch`), as arithmetic. One pool of blocks of `page_size` token
    slots; a request holding `n` tokens occupies ceil(n / page_size) blocks, so it wastes under one block (only its
    last is partly empty), whatever the other requests do. Its live trace: `kvlab.caches.paged`. No `page_size`:
    transformers' default (`_compat.default_page_size`)."""
    check_paged_layers(arch.layer_kinds, arch.name)
    page_size = check_page_size(_compat.default_page_size() if page_size is None else page_size)
    if not lengths or min(lengths) < 1:
        raise ValueError(_("every request must hold at least one token; got lengths {lengths}").format(lengths=lengths))
    per_token = cache_size(arch, "dynamic", 1, dtype=dtype).bytes  # keys and values of every layer
    blocks = sum(paged_blocks(n, page_size) for n in lengths)
    reserved, live = blocks * page_size, sum(lengths)
    return {
        "label": f"paged (page_size {page_size})",
        "cache_kind": "paged",
        "options": {"page_size": page_size},
        "tokens": live,
        "prefill": live,
        "batch": len(lengths),
        "dtype": dtype,
        "bytes": reserved * per_token,
        "peak_bytes": reserved * per_token,
        "slots_live": live,
        "slots_stored": reserved,
        "blocks": blocks,
        "packed_bytes": 0,
        "residual_bytes": 0,
        "by_layer_kind": {"full": reserved * per_token},
        "cross_bytes": 0,
        "bytes_per_token": reserved * per_token / live,
        "waste_bytes": (reserved - live) * per_token,
        "fragmentation_pct": waste_pct(reserved - live, reserved),
        "note": f"{blocks} blocks of {page_size} slots for {len(lengths)} requests of {live:,} tokens in all",
    }


def position_notes(
    arch: Architecture, tokens: int, *, source_tokens: int | None = None, lengths: list[int] | None = None
) -> list[str]:
    """A note for each count past the model's positions (`max_position_embeddings`): the bytes are still what a
    cache of that many tokens holds, but the model was not built to attend that far (transformers only warns)."""
    if not arch.max_positions:
        return []
    limit = arch.max_positions
    notes = []
    most = max([tokens, *(lengths or [])])
    if most > limit:
        notes.append(
            f"{most:,} tokens is past {arch.name}'s {limit:,} positions (max_position_embeddings): the model was not "
            "built to attend that far; the sizes are what a cache of that many tokens would hold"
        )
    source = tokens if source_tokens is None else source_tokens
    if arch.is_encoder_decoder and source > limit:
        notes.append(f"{source:,} source tokens is past {arch.name}'s {limit:,} encoder positions")
    return notes


def format_rows(arch: Architecture, rows: list[dict], tokens: int, notes: list[str] = ()) -> str:
    """A plain-text table; bytes exact, with a human-readable size beside them. `notes` (e.g. `position_notes`)
    follow the architecture's own note, one line each."""
    dynamic = next((r for r in rows if r["cache_kind"] == "dynamic" and "unsupported" not in r), None)
    lines = [arch.describe()]
    if arch.note:
        lines.append(f"note: {arch.note}")
    lines.extend(f"note: {note}" for note in notes)
    lines.append(f"{'cache':<32} {'bytes':>16} {'':>11} {'peak':>11} {'B/token':>10} {'vs dynamic':>10}  notes")
    reasons: list[str] = []
    for row in rows:
        if "unsupported" in row:
            if row["unsupported"] in reasons:  # said once, referred to after
                lines.append(f"{row['label']:<32} unsupported: same reason as above")
            else:
                reasons.append(row["unsupported"])
                lines.append(f"{row['label']:<32} unsupported: {row['unsupported']}")
            continue
        same_tokens = row["cache_kind"] != "paged" or (
            dynamic and row["tokens"] == dynamic["tokens"] * dynamic["batch"]
        )
        ratio = f"{row['bytes'] / dynamic['bytes']:.3f}x" if same_tokens and dynamic and dynamic["bytes"] else "-"
        notes = []
        if row["waste_bytes"]:
            notes.append(f"waste {human_bytes(row['waste_bytes'])} ({row['slots_stored'] - row['slots_live']:,} slots)")
        if row.get("state_bytes"):  # bytes that do not grow with tokens: a linear layer's state, counters
            slots = row["bytes"] - row["state_bytes"] - row["cross_bytes"]
            notes.append(f"token slots {slots:,} B + state {human_bytes(row['state_bytes'])}")
        if row["cache_kind"] == "quantized" and row["residual_bytes"]:
            notes.append(f"packed {human_bytes(row['packed_bytes'])} + residual {human_bytes(row['residual_bytes'])}")
        if len(row["by_layer_kind"]) > 1:
            notes.append(", ".join(f"{k} {human_bytes(v)}" for k, v in row["by_layer_kind"].items()))
        if row["note"]:
            notes.append(row["note"])
        lines.append(
            f"{row['label']:<32} {row['bytes']:>16,} {human_bytes(row['bytes']):>11} "
            f"{human_bytes(row['peak_bytes']):>11} {row['bytes_per_token']:>10,.0f} {ratio:>10}  " + "; ".join(notes)
        )
    return "\n".join(lines)
