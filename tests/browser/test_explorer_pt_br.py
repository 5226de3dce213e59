"""The Cache Explorer in Portuguese, in a real browser: `kvlab explore --lang pt-BR` (Voila) on the tiny Llama.

The served notebook calls `explore(..., lang="pt-BR")`, so the page must show the Portuguese labels (buttons, control
labels, status line, table headers, the paged kind's name in the cache menu) before and after a run, numbers with the
Portuguese marks, and a run must complete. Portuguese runs longer than English: no label, button, menu or table text
may be cut at 1280 px, for every cache kind's options and after the run. The launch -> first frame time is recorded
(a benchmark figure, not asserted). Screenshot: test-artifacts/explorer_voila_pt_br.png.
"""

from __future__ import annotations

import re
import sys

import pytest

from kvlab.cache_kinds import CACHE_KINDS
from kvlab.i18n import _, set_language
from tests.i18n.test_proofreading import english_phrases

from .conftest import KINDS_SHOWING_EVERY_OPTION, Server, cut_texts, first_frame, free_port, isolated_env

pytestmark = [pytest.mark.browser]


@pytest.fixture
def voila_pt_br(tmp_path):
    """`kvlab explore --lang pt-BR --model tiny-llama` (Voila), stopped by pid."""
    port, token = free_port(), "kvlab-test-token"
    command = [
        sys.executable,
        "-m",
        "kvlab.cli",
        "explore",
        "--port",
        str(port),
        "--no-browser",
        "--token",
        token,
        "--model",
        "tiny-llama",
        "--lang",
        "pt_br",  # any spelling: the command settles it as "pt-BR" before writing the notebook
    ]
    server = Server(command, tmp_path, isolated_env(tmp_path), port, token, tmp_path / "voila.log")
    try:
        server.wait_ready(None)
        yield server
    finally:
        server.stop()


def test_kvlab_explore_in_portuguese(voila_pt_br, page, artifact):
    page.goto(voila_pt_br.url("/"))
    explorer = page.locator(".kvlab-explorer").first
    explorer.wait_for(timeout=120_000)
    first_frame(voila_pt_br, "pt_br")

    assert explorer.locator("button.kvlab-run").inner_text().strip() == "Executar"
    assert explorer.locator("button.kvlab-stop").inner_text().strip() == "Parar"
    assert explorer.locator("button.kvlab-compare").inner_text().strip() == "Adicionar à comparação"
    assert "Explorador de Cache do kvlab" in explorer.inner_text()
    assert explorer.locator(".kvlab-model .widget-label").inner_text().strip() == "modelo"
    assert explorer.locator(".kvlab-max-new-tokens .widget-label").inner_text().strip() == "máx. de tokens novos"
    try:  # the status line, before or after the model loaded in the background (as the catalog translates it)
        set_language("pt-BR")
        loaded = _("{model} is loaded: choose a cache and press Run.").format(model="tiny-llama")
    finally:
        set_language(None)
    status = explorer.locator(".kvlab-status").inner_text()
    assert "Escolha um modelo e um cache e pressione Executar." in status or loaded in status
    assert "Nenhuma execução ainda" in explorer.locator(".kvlab-summary").inner_text()
    # ipywidgets writes an option's spaces as no-break spaces
    kinds = [k.replace("\xa0", " ") for k in explorer.locator(".kvlab-cache select option").all_inner_texts()]
    assert "estático" in kinds and "paginado (generate_batch)" in kinds  # every kind in the reader's words (issue 42)
    assert cut_texts(explorer, tuple(KINDS_SHOWING_EVERY_OPTION)) == {}

    explorer.locator(".kvlab-cache select").select_option("estático")
    explorer.locator(".kvlab-max-cache-len").wait_for(state="visible", timeout=30_000)
    explorer.locator("button.kvlab-run").click()
    status = explorer.locator(".kvlab-status")
    status.filter(has_text=re.compile(r"^concluída: \d+ tokens \(prompt de \d+ tokens\) em \d+,\d\d s$")).wait_for(
        timeout=150_000
    )

    row = explorer.locator('.kvlab-summary tr[data-run="now"]')  # the row's key stays English
    row.wait_for(timeout=30_000)  # the table is drawn right after the status line
    headers = explorer.locator(".kvlab-summary th").all_inner_texts()
    assert {"execução", "prompt", "novos", "alocadas", "ocupadas", "mascaradas", "desperdício %"} <= set(headers)
    assert row.locator('td[data-field="run"]').inner_text().strip() == "agora"
    for field in ("slots_allocated", "peak_bytes"):
        cell = row.locator(f'td[data-field="{field}"]')
        value = int(cell.get_attribute("data-value"))
        assert value > 0 and cell.inner_text().strip() == f"{value:,}".replace(",", ".")  # 7.326.720
    plot = explorer.locator("img.kvlab-plot")
    assert plot.evaluate("img => img.complete && img.naturalWidth > 400 && img.naturalHeight > 300")
    explorer.locator("button.kvlab-run:not([disabled])").wait_for()  # the run's last redraw is in
    assert cut_texts(explorer) == {}
    # no English sentence anywhere on the page: labels, status, table, the generated text's frame (the tiny model's
    # own output is random bytes, and its name and the cache kinds are identifiers)
    assert english_phrases(explorer.inner_text(), names=("tiny-llama", *CACHE_KINDS)) == []  # "none": a kind
    assert "Traceback" not in page.content()
    page.screenshot(path=artifact("explorer_voila_pt_br.png"), full_page=True)
