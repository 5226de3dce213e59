"""`Trace`, `RunResult`, a summary and a layer table show HTML in a notebook (kvlab/html.py), readable in any
theme; the HTML is registered with IPython by `kvlab.html`, the recording layer does not import it (issue 20)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.formatters import format_display_data
from IPython.core.interactiveshell import InteractiveShell

import kvlab
from kvlab import html
from kvlab.recording.trace import Trace
from kvlab.units import human_bytes

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def shell():
    """The IPython shell `format_display_data` formats with, kvlab's HTML registered as in a notebook."""
    shell = InteractiveShell.instance()
    assert html.register_ipython(shell)
    return shell


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


def page_of(obj) -> str:
    return format_display_data(obj)[0]["text/html"]


def test_transfers_flushes_and_an_empty_trace():
    assert 'data-value="0"' in page_of(Trace()) and "kvlab Trace</b>" in page_of(Trace())
    assert "<details" not in page_of(Trace())  # no layers, no per-layer table
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
    page = page_of(Trace([transfer], {"model": "m", "cache_kind": "offloaded", "options": {}}))
    assert value(page, "transfers") == "1" and value(page, "transfer_bytes") == "2048" and "2.0 KiB" in page
    assert human_bytes(512, decimals=1) == "512 B" and human_bytes(3 * 1024 * 1024, decimals=1) == "3.0 MiB"


def test_colours_come_from_the_notebook_theme():
    """Every colour is a JupyterLab theme variable (light or dark) with a fallback: no fixed text colour."""
    page = page_of(Trace()) + html.layer_table([{"layer_idx": 0, "layer_kind": "full"}])
    colours = re.findall(r"(?:color|border-bottom|border):([^;\"]+)", page)
    assert colours and all("var(--jp-" in c for c in colours), colours


def test_a_summary_and_a_layer_table_show_as_html_tables_and_as_text(tiny, prompt_ids):
    trace = kvlab.run(
        tiny("tiny-gemma3"), None, prompt_ids(12), cache="static", max_cache_len=32, max_new_tokens=5
    ).trace
    data = format_display_data(trace.summary())[0]
    assert data["text/plain"] == repr(trace.summary()) and data["text/html"] == html.summary_table(trace.summary())
    assert value(data["text/html"], "peak_bytes") == str(trace.summary()["peak_bytes"])
    data = format_display_data(trace.layer_table())[0]
    assert data["text/plain"] == repr(trace.layer_table()) and data["text/plain"].count("\n") == 6  # header + 6
    page = data["text/html"]
    assert "<details" not in page and page.count("<tr>") == 7  # unfolded: the header and one row per layer
    assert [c for c in re.findall(r"<th[^>]*>([^<]+)</th>", page)] == trace.layer_table().columns()
    assert value(page, "bytes_held") == str(trace.layer_table()[0]["bytes_held"]) and "2.0 KiB" in page
    assert "text/html" not in format_display_data(Trace().layer_table())[0]  # nothing to tabulate: the text


def test_the_html_is_registered_for_the_classes_it_names():
    """`DISPLAYS` names classes by module and name (registering imports neither): each name is the real one."""
    import importlib

    for module, name, _render in html.DISPLAYS:
        cls = getattr(importlib.import_module(module), name)
        assert (cls.__module__, cls.__name__) == (module, name)


def test_nothing_below_presentation_imports_kvlab_html():
    """Recording and `kvlab.run` sit above presentation: none of their modules imports kvlab.html (issue 20)."""
    below = [*sorted((ROOT / "kvlab" / "recording").glob("*.py")), ROOT / "kvlab" / "recorded_run.py"]
    importers = []
    for path in below:
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            if any(n == "kvlab.html" or n.startswith("kvlab.html.") for n in names):
                importers.append(path.name)
    assert importers == []
    assert not hasattr(Trace, "_repr_html_") and not hasattr(kvlab.RunResult, "_repr_html_")


def test_in_a_running_ipython_importing_kvlab_turns_the_html_on():
    """What a notebook does: IPython is running, then `import kvlab` (kvlab.html never named); from then on a
    trace and a result show as HTML. Registered by name, so `import kvlab` still does not pay for torch."""
    script = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "formatter = InteractiveShell.instance().display_formatter.formatters['text/html']\n"
        "import kvlab\n"
        "shown = [formatter.lookup_by_type(f'{m}.{n}').__name__ for m, n in\n"
        "         [('kvlab.recording.trace', 'Trace'), ('kvlab.recorded_run', 'RunResult')]]\n"
        "print(*shown, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trace_html", "run_result_html", "False"]
