"""The explorer, its figure and the rich HTML of a `RunResult`, readable in JupyterLab's dark theme.

JupyterLab starts with the "JupyterLab Dark" theme (a user setting in the test's temporary Jupyter config
directory) on a two-cell notebook: the explorer on a tiny model after a static run, a comparison run, saved
files and a run that fails with a bug (its message and folded traceback), then a `kvlab.run` result as the
cell's value. In the browser, every piece of text must reach WCAG AA contrast (4.5:1) against the background it
is drawn on, the figure must paint its own opaque white background, and the traceback must open on a click.
Screenshots: test-artifacts/explorer_lab_dark*.png.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from .conftest import serving_lab

pytestmark = [pytest.mark.browser]

KERNEL_IDLE = re.compile(r"Python 3 \(ipykernel\) \| Idle")

EXPLORER_CELL = """\
import kvlab
from kvlab.explorer import explore, generation

ex = explore(model_name="tiny-gemma3", prompt_presets={"short": "The KV cache keeps keys and values."})
ex.run_and_wait(cache="static", max_cache_len=64, max_new_tokens=8)
ex.on_add_to_comparison()
ex.run_and_wait(cache="dynamic", max_new_tokens=8)
ex.on_save_trace()
ex.on_save_table()

def broken(*args, **kwargs):  # a bug on purpose: the message line, then the traceback folded under it
    raise RuntimeError("boom: a bug on purpose")

generation.generate_traced, real = broken, generation.generate_traced
ex.run_and_wait(max_new_tokens=2)
generation.generate_traced = real
ex"""

RESULT_CELL = """\
model, tokenizer = ex.store.get("tiny-gemma3")
kvlab.run(model, tokenizer, "The KV cache", cache="static", max_cache_len=32, max_new_tokens=4)"""

# Contrast of an element's text against the colour actually behind it (its own and its ancestors' backgrounds,
# composited over the page), WCAG 2 relative luminance.
CONTRAST_JS = """
(el) => {
  const parse = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
  };
  const over = (top, base) => ({r: top.r * top.a + base.r * (1 - top.a), g: top.g * top.a + base.g * (1 - top.a),
                                b: top.b * top.a + base.b * (1 - top.a), a: 1});
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
  };
  const layers = [];
  for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
    const bg = parse(getComputedStyle(node).backgroundColor);
    if (bg && bg.a > 0) { layers.push(bg); if (bg.a === 1) break; }
  }
  let back = {r: 255, g: 255, b: 255, a: 1};
  for (const layer of layers.reverse()) back = over(layer, back);
  const fore = over(parse(getComputedStyle(el).color), back);
  const [hi, lo] = [lum(fore), lum(back)].sort((a, b) => b - a);
  return {ratio: (hi + 0.05) / (lo + 0.05), color: getComputedStyle(el).color,
          background: `rgb(${Math.round(back.r)}, ${Math.round(back.g)}, ${Math.round(back.b)})`};
}
"""

# The plot's corner pixels, read from the <img> the widget drew (same origin: a blob URL).
CORNERS_JS = """
(img) => {
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const at = (x, y) => Array.from(ctx.getImageData(x, y, 1, 1).data);
  return [at(0, 0), at(img.naturalWidth - 1, img.naturalHeight - 1)];
}
"""

# Text a learner reads, by selector inside the notebook (each must exist).
READABLE = {
    "app title": ".kvlab-explorer .widget-html-content b",
    "control label": ".kvlab-cache label",
    "status": ".kvlab-status .widget-html-content",
    "summary table cell": '.kvlab-summary td[data-field="slots_allocated"]',
    "summary run label": ".kvlab-summary li",
    "error message": ".kvlab-message .kvlab-error",
    "traceback toggle": ".kvlab-traceback summary",
    "download link": ".kvlab-downloads a.kvlab-download",
    "save button": "button.kvlab-save-trace",
    "run result header": ".kvlab-html-run b",
    "run result number": '.kvlab-html-run td[data-field="slots_allocated"]',
    "run result text": ".kvlab-html-run pre",
}


def write_notebook(root) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(EXPLORER_CELL), nbformat.v4.new_code_cell(RESULT_CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, root / "dark.ipynb")


@pytest.fixture
def dark_lab(tmp_path):
    """JupyterLab in its dark theme on a two-cell notebook, 127.0.0.1 with a token, stopped by pid."""
    with serving_lab(tmp_path, write_notebook, settings={"themes": {"theme": "JupyterLab Dark"}}) as server:
        yield server


def test_explorer_and_run_result_are_readable_in_the_dark_theme(dark_lab, page, artifact):
    page.goto(dark_lab.url("/lab/tree/dark.ipynb"))
    page.get_by_text(KERNEL_IDLE).wait_for(timeout=120_000)
    assert page.evaluate("document.body.dataset.jpThemeName") == "JupyterLab Dark"
    page.locator(".jp-Notebook .jp-CodeCell").first.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    page.keyboard.press("Shift+Enter")
    notebook = page.locator(".jp-Notebook")
    explorer = notebook.locator(".kvlab-explorer")
    explorer.wait_for(timeout=120_000)
    result = notebook.locator(".kvlab-html-run")
    result.wait_for(timeout=120_000)
    explorer.locator(".kvlab-message .kvlab-error", has_text="RuntimeError: boom: a bug on purpose").wait_for()
    page.screenshot(path=artifact("explorer_lab_dark.png"), full_page=True)
    explorer.screenshot(path=artifact("explorer_lab_dark_app.png"))
    result.screenshot(path=artifact("explorer_lab_dark_run_result.png"))

    contrast = {name: notebook.locator(selector).first.evaluate(CONTRAST_JS) for name, selector in READABLE.items()}
    background = contrast["status"]["background"]
    assert sum(int(v) for v in re.findall(r"\d+", background)) < 3 * 80, background  # the page really is dark
    unreadable = {name: c for name, c in contrast.items() if c["ratio"] < 4.5}
    assert not unreadable, unreadable

    plot = explorer.locator("img.kvlab-plot")
    assert plot.evaluate("img => img.complete && img.naturalWidth > 400")
    assert plot.evaluate(CORNERS_JS) == [[255, 255, 255, 255]] * 2  # its own opaque white, not the dark page

    assert explorer.locator(".kvlab-status").inner_text() == "failed"  # reported after the running state
    assert explorer.locator("button.kvlab-run").is_enabled()
    assert explorer.locator("button.kvlab-save-trace").is_enabled()

    traceback = explorer.locator(".kvlab-traceback pre")
    assert not traceback.is_visible()  # folded: the message line alone until asked
    explorer.locator(".kvlab-traceback summary").click()
    traceback.wait_for(state="visible")
    assert "Traceback (most recent call last)" in traceback.inner_text() and "in broken" in traceback.inner_text()
    explorer.screenshot(path=artifact("explorer_lab_dark_traceback.png"))
