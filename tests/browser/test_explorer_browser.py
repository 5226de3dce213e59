"""The Cache Explorer in a real browser: `kvlab explore` (Voila) and notebook 11 in JupyterLab.

Each test chooses a static cache, presses Run, and checks the summary row against a direct `kvlab.run` with the
same model, prompt (in SmolLM2's chat template, the explorer's default for a chat model) and options, checks that
the plot rendered, saves the trace through the browser's download and loads that file back through the Load trace
upload, checks that an invalid option shows its message, and saves screenshots under test-artifacts/.
`kvlab explore` is also timed from launch to its first frame (a benchmark figure, not asserted), shows no broken
image before the first run, and cuts no text at 1280 px (every cache kind's options, then the table after the run).
"""

from __future__ import annotations

import re

import pytest

import kvlab
from kvlab.explorer.prompts import presets
from kvlab.recording.trace import Trace

from .conftest import KINDS_SHOWING_EVERY_OPTION, cut_texts, first_frame

pytestmark = [pytest.mark.browser, pytest.mark.real_model]

MAX_CACHE_LEN = 96  # the first preset in the chat template (51 tokens) and 16 new tokens fit
NEW_TOKENS = 16  # the explorer's default


@pytest.fixture(scope="module")
def expected(smollm2) -> dict:
    """What the explorer must report for SmolLM2, the first preset in its chat template, a static cache of
    MAX_CACHE_LEN and 16 new tokens."""
    prompt = next(iter(presets().values()))
    return kvlab.run(
        *smollm2, prompt, cache="static", max_cache_len=MAX_CACHE_LEN, max_new_tokens=NEW_TOKENS, chat=True
    ).trace.summary()


def summary_value(explorer, field: str) -> int:
    cell = explorer.locator(f'.kvlab-summary tr[data-run="now"] td[data-field="{field}"]')
    return int(cell.get_attribute("data-value"))


def save_and_load_back(page, explorer, expected: dict, folder) -> None:
    """Save trace -> click its download link -> the browser's file; then Load trace with that file."""
    explorer.locator("button.kvlab-save-trace").click()
    link = explorer.locator(".kvlab-downloads a.kvlab-download", has_text="kvlab_trace_smollm2_static.json")
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "kvlab_trace_smollm2_static.json"
    path = folder / download.value.suggested_filename
    download.value.save_as(path)
    saved = Trace.load(path).summary()
    assert {f: saved[f] for f in expected if f != "tokens_per_s"} == {
        f: v for f, v in expected.items() if f != "tokens_per_s"
    }
    with page.expect_file_chooser() as chooser:
        explorer.locator(".kvlab-load-trace").click()
    chooser.value.set_files(path)
    status = explorer.locator(".kvlab-status")
    status.filter(has_text="loaded kvlab_trace_smollm2_static.json").wait_for(timeout=30_000)
    row = explorer.locator('.kvlab-summary tr[data-run="now"][title$="[loaded from kvlab_trace_smollm2_static.json]"]')
    row.wait_for(timeout=30_000)
    assert summary_value(explorer, "slots_allocated") == expected["slots_allocated"]


def exercise(page, explorer, expected: dict, screenshot, folder, whole_page: bool = False) -> None:
    """Choose static, Run, check the table and the plot (with `whole_page`, the explorer has the page's width, as in
    Voila: no text of it may be cut); then an invalid option; screenshots of both."""
    explorer.locator(".kvlab-cache select").select_option("static")
    explorer.locator(".kvlab-max-cache-len").wait_for(state="visible", timeout=30_000)
    explorer.locator(".kvlab-nbits").wait_for(state="hidden", timeout=30_000)  # only the options that apply
    length = explorer.locator(".kvlab-max-cache-len input")
    length.fill(str(MAX_CACHE_LEN))
    length.press("Enter")
    explorer.locator("button.kvlab-run").click()
    status = explorer.locator(".kvlab-status")
    status.filter(has_text=re.compile(r"^done: ")).wait_for(timeout=150_000)
    got = {f: summary_value(explorer, f) for f in ("slots_allocated", "slots_live", "slots_masked", "peak_bytes")}
    assert got == {f: expected[f] for f in got}
    assert got["slots_allocated"] == 30 * MAX_CACHE_LEN  # SmolLM2: 30 layers, every one static at MAX_CACHE_LEN
    plot = explorer.locator("img.kvlab-plot")
    assert plot.evaluate("img => img.complete && img.naturalWidth > 400 && img.naturalHeight > 300")
    if whole_page:
        assert cut_texts(explorer) == {}  # the table too, now that it has a row
    page.screenshot(path=screenshot("run.png"), full_page=True)
    explorer.screenshot(path=screenshot("run_app.png"))  # the whole app, even where Lab scrolls it
    save_and_load_back(page, explorer, expected, folder)

    explorer.locator(".kvlab-cache select").select_option("quantized")
    explorer.locator(".kvlab-backend select").select_option("quanto")
    explorer.locator(".kvlab-nbits select").select_option("3")
    explorer.locator("button.kvlab-run").click()
    message = explorer.locator(".kvlab-message")
    message.filter(has_text="quanto nbits must be one of 2, 4; got 3").wait_for(timeout=30_000)
    assert "Traceback" not in page.content()
    page.screenshot(path=screenshot("invalid_option.png"), full_page=True)


def test_kvlab_explore_in_voila(voila_server, page, expected, artifact, tmp_path):
    page.goto(voila_server.url("/"))
    explorer = page.locator(".kvlab-explorer").first
    explorer.wait_for(timeout=120_000)
    first_frame(voila_server, "en")
    plot = explorer.locator("img.kvlab-plot")  # before any run: an image (the empty picture soon), never a broken one
    plot.wait_for(state="attached")
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=plot.element_handle(), timeout=30_000)
    assert cut_texts(explorer, tuple(KINDS_SHOWING_EVERY_OPTION)) == {}  # every kind's options, at 1280 px
    exercise(page, explorer, expected, lambda name: artifact(f"explorer_voila_{name}"), tmp_path, whole_page=True)


def test_notebook_11_in_jupyterlab(lab_server, page, expected, artifact, tmp_path):
    page.goto(lab_server.url("/lab/tree/11_cache_explorer.ipynb"))
    # Lab reads "Idle" before the kernel is connected: wait for "<kernel> | Idle" in the status bar.
    idle = page.get_by_text(re.compile(r"Python 3 \(ipykernel\) \| Idle"))
    idle.wait_for(timeout=120_000)
    first_code = page.locator(".jp-Notebook .jp-CodeCell").first
    first_code.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    explorer = first_code.locator(".kvlab-explorer")
    explorer.wait_for(timeout=120_000)
    exercise(page, explorer, expected, lambda name: artifact(f"explorer_lab_{name}"), tmp_path)
