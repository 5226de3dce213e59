"""`Trace` and `RunResult` show a compact HTML summary in a notebook (kvlab/html.py), readable in any theme."""

from __future__ import annotations

import re

from IPython.core.formatters import format_display_data

import kvlab
from kvlab import html
from kvlab.recording.trace import Trace
from kvlab.units import human_bytes


def value(page: str, field: str):
    """The raw value of the cell `field` (every number cell carries it in data-value)."""
    return re.search(rf'data-field="{field}" data-value="([^"]+)"', page).group(1)


def test_a_trace_shows_its_summary_table_in_a_notebook(tiny, prompt_ids):
    result = kvlab.run(tiny("tiny-gemma3"), None, prompt_ids(12), cache="static", max_cache_len=32, max_new_tokens=5)
    trace = result.trace
    data, _ = format_display_data(trace)  # what IPython sends to the notebook
    page = data["text/html"]
    assert data["text/plain"] == repr(trace)
    s = trace.summary()
    for field in (
        "steps",
        "peak_bytes",
        "final_bytes",
        "slots_allocated",
        "slots_live",
        "slots_masked",
        "tokens_evicted",
        "crops",
        "flushes",
        "transfers",
    ):
        assert value(page, field) == str(s[field]), field
    assert value(page, "waste_pct") == str(s["waste_pct"]) and "waste %" in page
    assert "gemma3_text" in page and "<code>static</code> (max_cache_len=32)" in page
    assert "6 layers</summary>" in page and page.count('data-field="layer_idx"') == 6  # folded per-layer table
    assert "prompt 12 tokens, 5 new" in page


def test_a_run_result_shows_model_cache_options_text_and_summary(tiny, prompt_ids):
    result = kvlab.run(tiny("tiny-llama"), None, prompt_ids(8), cache="dynamic", max_new_tokens=4)
    result.text = "<b>not bold</b> & more"  # text is shown, escaped
    page = format_display_data(result)[0]["text/html"]
    assert page.startswith('<div class="kvlab-html kvlab-html-run">')
    assert "llama · cache" in page and "<code>dynamic</code> (default options)" in page and "float32" in page
    assert "&lt;b&gt;not bold&lt;/b&gt; &amp; more" in page and "<b>not bold</b>" not in page
    assert "prompt 8 tokens → 4 new tokens" in page
    assert value(page, "slots_live") == str(3 * 11)
    assert value(page, "peak_bytes") == str(result.trace.summary()["peak_bytes"])


def test_transfers_flushes_and_an_empty_trace():
    assert 'data-value="0"' in Trace()._repr_html_() and "kvlab Trace</b>" in Trace()._repr_html_()
    assert "<details" not in Trace()._repr_html_()  # no layers, no per-layer table
    transfer = {
        "type": "transfer",
        "step": 0,
        "role": "self",
        "layer_idx": 0,
        "direction": "offload",
        "bytes": 2048,
        "seconds": 0.1,
        "src": "cuda:0",
        "dst": "cpu",
        "moved": True,
    }
    page = Trace([transfer], {"model": "m", "cache": "offloaded", "options": {}})._repr_html_()
    assert value(page, "transfers") == "1" and value(page, "transfer_bytes") == "2048" and "2.0 KiB" in page
    assert human_bytes(512, decimals=1) == "512 B" and human_bytes(3 * 1024 * 1024, decimals=1) == "3.0 MiB"


def test_colours_come_from_the_notebook_theme():
    """Every colour is a JupyterLab theme variable (light or dark) with a fallback: no fixed text colour."""
    page = Trace()._repr_html_() + html.layer_table([{"layer_idx": 0, "layer_kind": "full"}])
    colours = re.findall(r"(?:color|border-bottom|border):([^;\"]+)", page)
    assert colours and all("var(--jp-" in c for c in colours), colours
