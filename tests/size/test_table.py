"""The paged layout in `kvlab size`: whole blocks per request, waste only in each request's last block."""

import pytest

from kvlab import _compat
from kvlab.serving import layout_rows
from kvlab.size import architecture, format_rows, size_rows
from kvlab.size.table import paged_row


def test_row_counts_blocks_slots_and_bytes():
    arch = architecture("llama-2-7b")  # 32 layers x 32 KV heads x 128, float16: 524,288 B per token
    row = paged_row(arch, [100, 250, 37], page_size=16, dtype="float16")
    assert row["blocks"] == 7 + 16 + 3
    assert (row["slots_stored"], row["slots_live"]) == (26 * 16, 387)
    assert row["bytes"] == 26 * 16 * 524_288
    assert row["waste_bytes"] == (416 - 387) * 524_288
    assert row["fragmentation_pct"] == round(100 * 29 / 416, 2)

    assert paged_row(arch, [100])["options"] == {"page_size": _compat.default_page_size()}  # transformers' default


def test_row_agrees_with_the_serving_comparison():
    arch, lengths = architecture("llama-2-7b"), [5, 40, 81, 16]
    per_token = paged_row(arch, [1], page_size=1)["bytes"]
    (serving,) = [
        r for r in layout_rows(lengths, per_token, max_cache_len=81, block_sizes=(16,)) if r["layout"] == "paged 16"
    ]
    row = paged_row(arch, lengths, page_size=16)
    assert (row["slots_stored"], row["bytes"]) == (serving["slots_allocated"], serving["bytes_held"])


def test_size_rows_add_the_paged_row_and_refuse_sliding_models():
    arch = architecture("llama-2-7b")
    rows = size_rows(arch, 1000, batch=2, page_size=256)
    assert rows[-1]["cache_kind"] == "paged" and rows[-1]["slots_stored"] == 2 * 1024 and rows[-1]["slots_live"] == 2000
    text = format_rows(arch, size_rows(arch, 1000, page_size=16, lengths=[100, 250]), 1000)
    assert "paged (page_size 16)" in text.splitlines()[-1] and " -  " in text.splitlines()[-1]  # other token count
    sliding = size_rows(architecture("gemma-3-4b"), 1000, page_size=16)[-1]
    assert "all full attention" in sliding["unsupported"]


def test_the_page_size_is_checked_by_the_paged_kinds_rule():
    from kvlab.caches.options import CacheOptionError

    with pytest.raises(CacheOptionError, match="page_size must be a positive integer; got 0"):
        paged_row(architecture("llama-2-7b"), [10], page_size=0)
