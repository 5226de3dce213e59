"""The live controls of notebooks 00 and 01 in JupyterLab in headless Chromium: move the slider, the plot changes.

Each test serves a trimmed copy of the notebook (the first code cell and the cells its live control needs), runs
them, checks the control drew its default plot, types a new value into the slider, and waits for the status to
report the new measurement and the <img> to show a different PNG. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re

import pytest

from .notebook_lab import lab_on, run_all_cells, set_slider

pytestmark = [pytest.mark.browser, pytest.mark.real_model]

CASES = {
    # notebook: (cells the live control needs, besides the first code cell; the slider's new value)
    "00_start_here.ipynb": (
        ["does use_cache=False change the generated text", "inputs = tokenizer(", "live(time_generate"],
        32,
    ),
    "01_dynamic_cache.ipynb": (["live(gemma_prefill"], 384),
}


def image_src(image) -> str:
    return image.get_attribute("src") or ""


@pytest.mark.parametrize("notebook", list(CASES))
def test_moving_the_live_control_redraws_the_plot(notebook, tmp_path, page, artifact):
    needles, new_value = CASES[notebook]
    stem = notebook.removesuffix(".ipynb")
    with lab_on(tmp_path, notebook, needles) as (server, cells):
        run_all_cells(page, server, notebook, cells)
        output = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-slider")).first
        status = output.locator(".widget-html").filter(has_text=re.compile(r"measured in"))
        status.wait_for(timeout=120_000)
        image = output.locator("img.widget-image")
        assert image.evaluate("img => img.complete && img.naturalWidth > 400 && img.naturalHeight > 200")
        before = image_src(image)
        assert before.startswith(("blob:", "data:"))
        old_value = output.locator(".widget-readout").inner_text().strip()
        page.screenshot(path=artifact(f"notebook_{stem}_default.png"), full_page=True)

        set_slider(output.locator(".widget-slider"), new_value)
        page.wait_for_function(
            "([img, old]) => img.getAttribute('src') !== old", arg=[image.element_handle(), before], timeout=60_000
        )
        status.wait_for(timeout=60_000)
        assert output.locator(".widget-readout").inner_text().strip() == str(new_value) != old_value
        assert image.evaluate("img => img.complete && img.naturalWidth > 400")
        assert "Traceback" not in output.inner_text() and "error:" not in output.inner_text()
        output.screenshot(path=artifact(f"notebook_{stem}_moved.png"))
