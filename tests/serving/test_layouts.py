"""kvlab.serving: the request workload and the per-layout reserved/live arithmetic."""

from __future__ import annotations

import pytest

from kvlab.serving import fits_in_budget, layout_rows, load_workload, request_lengths
from kvlab.serving.layouts import allocated_slots


def test_workload_file_has_varied_real_prompts():
    workload = load_workload()
    assert len(workload) == 8 and len(set(workload.ids)) == 8
    assert len({len(p) for p in workload.prompts}) == 8 and workload.max_new_tokens == 24


def test_workload_goes_through_the_chat_template(smollm2):
    _, tokenizer = smollm2
    workload = load_workload(tokenizer)
    assert workload.prompt_lengths == [43, 37, 38, 53, 34, 57, 40, 47]
    assert tokenizer.decode(workload.input_ids[1]).endswith("<|im_start|>assistant\n")


def test_request_lengths_drop_the_last_answer_token():
    assert request_lengths([10, 5], [4, 1]) == [13, 5]


def test_layout_rows_static_dynamic_paged():
    rows = {
        r["layout"]: r for r in layout_rows([10, 20, 30], 2, max_cache_len=40, block_sizes=(8, 64), budget_bytes=100)
    }
    assert rows["static"]["slots_allocated"] == 120 and rows["static"]["waste_pct"] == 50.0
    assert rows["dynamic"]["slots_masked"] == 0 and rows["dynamic"]["bytes_held"] == 120
    assert rows["paged 8"]["slots_allocated"] == 16 + 24 + 32  # 2, 3, 4 blocks
    assert rows["paged 64"]["slots_allocated"] == 192  # one block each: bigger blocks waste more
    assert [rows[k]["fit_in_budget"] for k in ("static", "dynamic", "paged 8", "paged 64")] == [1, 2, 2, 0]


def test_static_must_hold_the_longest_request():
    with pytest.raises(ValueError, match="longest"):
        allocated_slots("static", [10, 50], max_cache_len=40)


def test_fits_in_budget_admits_in_order():
    assert fits_in_budget([5, 5, 5], 12) == 2 and fits_in_budget([], 1) == 0
