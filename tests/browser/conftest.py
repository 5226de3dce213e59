"""Servers and a headless Chromium for the explorer's browser tests.

Every server binds 127.0.0.1 with a token and `port_retries=0` on a port picked free just before, runs from a
temporary directory with temporary Jupyter config/data/runtime directories (Lab autosaves what it runs, so it
gets a copy of the notebook), and is stopped by its pid in the fixture's teardown. The browser is Debian's
chromium (`make test-browser` installs it); without it every test here skips and says why.

Two checks the explorer's tests share: `first_frame` records how long `kvlab explore` took from launch to the
explorer on the page (a benchmark figure, printed and written to test-artifacts/, never asserted: the machine may be
busy), and `cut_texts` finds every label, button, menu or table text the page cuts off (an ellipsis, a clipped box).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("KVLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1280, "height": 1500}  # the width a learner's laptop gives the page: no text may be cut at it
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not Path(CHROMIUM).exists():
        pytest.skip(
            f"BROWSER TESTS SKIPPED: no chromium at {CHROMIUM}. Install Debian's package "
            "(`bash .ci/install-chromium`, which `make test-browser` runs) to test the Cache Explorer in a browser."
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("BROWSER TESTS SKIPPED: the playwright Python package is missing (pip install -e '.[test]').")
    return CHROMIUM


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A page that can only reach 127.0.0.1: every other request is aborted."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.route(lambda url: not url.startswith("http://127.0.0.1:"), lambda route: route.abort())
    page.route_web_socket(lambda url: not url.startswith("ws://127.0.0.1:"), lambda ws: ws.close())
    page.set_default_timeout(60_000)
    yield page
    context.close()


def isolated_env(tmp: Path) -> dict:
    """Environment for a server: temporary Jupyter/IPython dirs, the venv first on PATH, one torch thread."""
    for name in ("config", "data", "runtime", "ipython"):
        (tmp / name).mkdir(exist_ok=True)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTER_DATA_DIR": str(tmp / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "IPYTHONDIR": str(tmp / "ipython"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    # The explorer's model runs in the kernel while Chromium renders: on a small shared machine a single torch
    # thread keeps generation from stalling on oversubscribed cores. Respect a value set by the caller.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


class Server:
    def __init__(self, command: list[str], cwd: Path, env: dict, port: int, token: str, log: Path):
        self.port, self.token, self.log = port, token, log
        self._log_file = log.open("w")
        self.launched = time.monotonic()  # for `first_frame`
        self.ready_s: float | None = None  # launch -> the log's "is running at" (`wait_ready(None)`)
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True
        )

    def url(self, path: str = "/") -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}{path}{sep}token={self.token}"

    def wait_ready(self, path: str | None, timeout: float = 120) -> None:
        """Until `path` answers 200 (None: until the log says the server is running; a Voila GET runs a kernel)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            if path is None:
                if "is running at" in self.log.read_text():
                    self.ready_s = time.monotonic() - self.launched
                    return
                time.sleep(0.3)
                continue
            try:
                with urllib.request.urlopen(self.url(path), timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"server not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM to the pid we started (it shuts its kernels down), then SIGKILL to its own process group."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # leftovers of our own session only (start_new_session)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)
        self._log_file.close()


@pytest.fixture
def voila_server(tmp_path):
    """`kvlab explore` (Voila) with the tiny and bundled models available, stopped by pid."""
    port, token = free_port(), "kvlab-test-token"
    env = isolated_env(tmp_path)
    command = [sys.executable, "-m", "kvlab.cli", "explore", "--port", str(port), "--no-browser", "--token", token]
    server = Server(command, tmp_path, env, port, token, tmp_path / "voila.log")
    try:
        server.wait_ready(None)
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def serving_lab(tmp_path: Path, fill_root, settings: dict | None = None):
    """JupyterLab on `tmp_path/notebooks` (filled by `fill_root(root)`: Lab autosaves, so tests serve copies), with
    temporary Jupyter dirs, a token, 127.0.0.1 and `port_retries=0`; stopped by pid. `settings` maps an
    apputils-extension settings name (e.g. "themes") to its JSON object."""
    port, token = free_port(), "kvlab-test-token"
    env = isolated_env(tmp_path)
    folder = tmp_path / "config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    folder.mkdir(parents=True)
    # No "get Jupyter news?" toast over the screenshots.
    for name, value in {"notification": {"fetchNews": "false"}, **(settings or {})}.items():
        (folder / f"{name}.jupyterlab-settings").write_text(json.dumps(value))
    root = tmp_path / "notebooks"
    root.mkdir()
    fill_root(root)
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
    ]
    server = Server(command, tmp_path, env, port, token, tmp_path / "lab.log")
    try:
        server.wait_ready("/api/status")
        yield server
    finally:
        server.stop()


@pytest.fixture
def lab_server(tmp_path):
    """JupyterLab serving a temporary copy of notebook 11, stopped by pid."""
    name = "11_cache_explorer.ipynb"
    with serving_lab(tmp_path, lambda root: shutil.copy(REPO / "notebooks" / name, root / name)) as server:
        yield server


def first_frame(server: Server, name: str) -> float:
    """Seconds from the server's launch to now (call it once the explorer is on the page): printed and written to
    test-artifacts/explorer_first_frame_<name>.json as a benchmark figure, never asserted."""
    seconds = time.monotonic() - server.launched
    record = {"launch_to_first_frame_s": round(seconds, 2), "launch_to_server_ready_s": server.ready_s}
    record["load_average_1min"] = round(os.getloadavg()[0], 2)  # a busy machine explains a slow figure
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"explorer_first_frame_{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"BENCHMARK kvlab explore ({name}): first frame {seconds:.2f} s after launch, {record} (not asserted)")
    return seconds


# Every text of the explorer that the page cuts: a box whose content is wider than the box and does not overflow
# visibly (ipywidgets' labels and buttons end in an ellipsis, the page clips), a text that runs past the explorer's
# right edge, and a menu narrower than its chosen option's text (a <select> reports no scroll width of its own).
CUT_TEXT_JS = """
(root) => {
  const cut = [];
  const right = root.getBoundingClientRect().right;
  const text = (el) => (el.innerText || '').trim().replace(/\\s+/g, ' ').slice(0, 80);
  const ctx = document.createElement('canvas').getContext('2d');
  for (const el of root.querySelectorAll('*')) {
    const style = getComputedStyle(el);
    if (el.getClientRects().length === 0 || style.visibility === 'hidden') continue;
    if (['TEXTAREA', 'INPUT', 'OPTION', 'IMG'].includes(el.tagName)) continue;  // the learner's text; the plot
    if (el.tagName === 'SELECT') {
      const option = el.options[el.selectedIndex];
      ctx.font = style.font;
      const sides = ['paddingLeft', 'paddingRight', 'borderLeftWidth', 'borderRightWidth'];
      const need = ctx.measureText(option ? option.text : '').width
        + sides.reduce((sum, side) => sum + parseFloat(style[side]), 0);
      if (need > el.offsetWidth + 1)
        cut.push({text: option.text, why: `menu ${el.offsetWidth} px, text ${Math.ceil(need)} px`});
      continue;
    }
    if (!text(el)) continue;
    if (style.overflowX !== 'visible' && el.scrollWidth > el.clientWidth + 1)
      cut.push({text: text(el), why: `box ${el.clientWidth} px, content ${el.scrollWidth} px`});
    else if (el.children.length === 0 && el.getBoundingClientRect().right > right + 1)
      cut.push({text: text(el), why: `ends at ${el.getBoundingClientRect().right} px, past ${right}`});
  }
  return cut;
}
"""
# The cache kind whose options show each option widget at least once, and one widget that shows with them.
KINDS_SHOWING_EVERY_OPTION = {
    "dynamic": ".kvlab-past-recording",
    "offloaded_static": ".kvlab-offload-only-non-sliding",
    "quantized": ".kvlab-nbits",
    "paged": ".kvlab-page-size",
}


def cut_texts(explorer, kinds: tuple[str, ...] = ()) -> dict[str, list[dict]]:
    """{what was shown: the texts cut}, for the explorer as it is ("as shown") or, for each of `kinds`, with that
    cache kind chosen (its option widgets shown); empty when nothing is cut. Leaves the last kind chosen."""
    from kvlab.explorer.controls import KINDS

    found = {}
    if not kinds:
        found["as shown"] = explorer.evaluate(CUT_TEXT_JS)
    for kind in kinds:
        explorer.locator(".kvlab-cache select").select_option(index=KINDS.index(kind))
        explorer.locator(KINDS_SHOWING_EVERY_OPTION[kind]).wait_for(state="visible", timeout=30_000)
        found[kind] = explorer.evaluate(CUT_TEXT_JS)
    return {shown: cut for shown, cut in found.items() if cut}


@pytest.fixture
def artifact():
    """artifact(name) -> a path under test-artifacts/ (gitignored) for screenshots."""
    ARTIFACTS.mkdir(exist_ok=True)
    return lambda name: ARTIFACTS / name
