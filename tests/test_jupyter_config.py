"""`make lab`'s server settings (jupyter_server_config.py) list each notebook once: the .ipynb, not its jupytext
.py twin. Checked on a real Jupyter server over the notebooks folder, as the file browser asks for it."""

from __future__ import annotations

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

pytest.importorskip("jupyter_server")

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "jupyter_server_config.py"
FOLDERS = ("", "pt-BR")  # where the notebook pairs are, under notebooks/
TOKEN = "kvlab-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    """listing(folder) -> the names the server lists in notebooks/<folder>: `jupyter server` with the config on
    127.0.0.1, a token and temporary Jupyter dirs, stopped by its pid."""
    tmp = tmp_path_factory.mktemp("jupyter")
    env = {**os.environ, **{f"JUPYTER_{d.upper()}_DIR": str(tmp / d) for d in ("config", "data", "runtime")}}
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "server",
        f"--config={CONFIG}",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={TOKEN}",
        "--allow-root",
        "--no-browser",
        f"--ServerApp.root_dir={ROOT / 'notebooks'}",
    ]
    log = (tmp / "server.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def get(path: str) -> dict:
        url = f"http://127.0.0.1:{port}/api/contents/{path}?content=1&token={TOKEN}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp / "server.log").read_text()[-3000:]
            try:
                get("")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, (tmp / "server.log").read_text()[-3000:]
                time.sleep(0.3)
        yield (lambda folder: {item["name"] for item in get(folder)["content"]}), get
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        log.close()


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_notebook_is_listed_once_and_only_the_pairs_are_left_out(listing, folder):
    names, _ = listing
    # what a server never lists anyway: dot files (.ipynb_checkpoints) and Python's caches
    on_disk = {p.name for p in (ROOT / "notebooks" / folder).iterdir()} - {"__pycache__"}
    on_disk = {n for n in on_disk if not n.startswith(".")}
    notebooks = {n for n in on_disk if n.endswith(".ipynb")}
    pairs = {n.removesuffix(".ipynb") + ".py" for n in notebooks}
    assert len(notebooks) >= 13 and pairs <= on_disk
    listed = names(folder)
    assert notebooks <= listed and not pairs & listed
    assert on_disk - listed == pairs  # nothing else is hidden


def test_a_left_out_script_still_opens_by_its_path(listing):
    _, get = listing
    opened = get("00_start_here.py")
    assert opened["name"] == "00_start_here.py" and opened["content"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_starts_with_these_settings():
    """`make -n lab` (a dry run: nothing installed or started) passes this file to `jupyter lab`."""
    done = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (lab,) = [line for line in done.stdout.splitlines() if " lab " in line and "jupyter" in line]
    assert f"--config={CONFIG.name}" in lab.split()
