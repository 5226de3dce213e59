from __future__ import annotations

import re

from kvlab.explorer import summary
from kvlab.explorer.session import RunRequest, Session


def test_rows_show_comparisons_then_the_current_run_with_raw_values():
    session = Session()
    for cache, options in (("dynamic", {}), ("static", {"max_cache_len": 64})):
        session.start(RunRequest(model="tiny-llama", cache=cache, options=options, prompt="abcdefgh", max_new_tokens=4))
        session.wait(60)
        if cache == "dynamic":
            session.add_to_comparison()
    rows = summary.rows_for(session)
    assert [r["run"] for r in rows] == ["[1]", "now"]
    assert [(r["slots_allocated"], r["slots_live"], r["slots_masked"]) for r in rows] == [
        (3 * 11, 3 * 11, 0),
        (3 * 64, 3 * 11, 3 * 53),
    ]  # 3 layers, 8 prompt + 3 cached new tokens
    page = summary.to_html(rows)
    assert page.count('class="kvlab-row"') == 2
    assert re.search(r'data-field="slots_allocated" data-value="192"[^>]*>192<', page)
    assert "No runs yet" in summary.to_html([])
