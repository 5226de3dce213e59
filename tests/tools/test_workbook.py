"""The learner's workbook (tools/workbook.py): copies of the committed notebooks without outputs, never overwritten,
refreshed only on request with the learner's copy kept, each linking to the committed run (the answer key)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from tools import workbook

ROOT = Path(__file__).resolve().parents[2]
NOW = time.struct_time((2026, 12, 5, 23, 50, 0, 5, 339, 0))


def _notebook(source: str) -> nbformat.NotebookNode:
    """A small committed notebook: a title, a code cell run with outputs (one tagged), jupytext pairing, run stamps."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 01 · A cache"),
        nbformat.v4.new_code_cell(
            source,
            execution_count=3,
            outputs=[nbformat.v4.new_output("stream", name="stdout", text="42\n")],
            metadata={"tags": ["raises-exception"], "execution": {"iopub.status.busy": "2026-01-01T00:00:00"}},
        ),
        nbformat.v4.new_code_cell("guess = None", execution_count=4),
    ]
    nb.metadata["jupytext"] = {"formats": "ipynb,py:percent"}
    nb.metadata["kvlab"] = {"executed_code_sha256": "0" * 64, "figure_overflow": [], "figure_texts": []}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


@pytest.fixture
def repo(tmp_path):
    """notebooks/01_a_cache.ipynb and its pt-BR twin, as committed; the workbook goes to workbook/ beside them."""
    for folder in ("", "pt-BR"):
        (tmp_path / "notebooks" / folder).mkdir(parents=True, exist_ok=True)
        nbformat.write(_notebook("print(42)"), tmp_path / "notebooks" / folder / "01_a_cache.ipynb")
    (tmp_path / "notebooks" / "01_a_cache.py").write_text("# %%\nprint(42)\n")  # a paired script: not copied
    return tmp_path


def _prepare(repo, *names):
    return workbook.prepare(names, notebooks=repo / "notebooks", workbook=repo / "workbook")


def _refresh(repo, *names):
    return workbook.refresh(names, notebooks=repo / "notebooks", workbook=repo / "workbook", now=NOW)


def test_prepare_copies_every_notebook_without_outputs_or_counts(repo):
    assert _prepare(repo) == ["created workbook/01_a_cache.ipynb", "created workbook/pt-BR/01_a_cache.ipynb"]
    assert sorted(p.relative_to(repo / "workbook").as_posix() for p in (repo / "workbook").rglob("*")) == [
        "01_a_cache.ipynb",
        "answers",
        "answers/01_a_cache.ipynb",
        "answers/pt-BR",
        "answers/pt-BR/01_a_cache.ipynb",
        "pt-BR",
        "pt-BR/01_a_cache.ipynb",
    ]
    for path in [repo / "workbook" / "01_a_cache.ipynb", repo / "workbook" / "pt-BR" / "01_a_cache.ipynb"]:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        assert [cell.source for cell in code] == ["print(42)", "guess = None"]
        assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
        assert code[0].metadata == {"tags": ["raises-exception"]}  # the tag kept, the run's timings gone


def test_pairing_and_the_committed_runs_record_are_dropped(repo):
    _prepare(repo)
    nb = nbformat.read(repo / "workbook" / "01_a_cache.ipynb", as_version=4)
    assert "jupytext" not in nb.metadata  # no `formats`: jupytext in JupyterLab writes no script beside it
    assert "kvlab" not in nb.metadata and "widgets" not in nb.metadata
    committed = nbformat.read(repo / "notebooks" / "01_a_cache.ipynb", as_version=4)
    assert committed.metadata["jupytext"] == {"formats": "ipynb,py:percent"}  # the committed notebook is untouched
    assert committed.cells[1].outputs


def test_the_first_cell_links_to_its_read_only_answer_key_in_its_language(repo):
    _prepare(repo)
    english = nbformat.read(repo / "workbook" / "01_a_cache.ipynb", as_version=4).cells[0]
    portuguese = nbformat.read(repo / "workbook" / "pt-BR" / "01_a_cache.ipynb", as_version=4).cells[0]
    assert english.cell_type == portuguese.cell_type == "markdown"
    assert "[`answers/01_a_cache.ipynb`](answers/01_a_cache.ipynb)" in english.source
    assert "`notebooks/01_a_cache.ipynb`" in english.source
    assert "answer key" in english.source and "make workbook-refresh NB=01_a_cache" in english.source
    assert "[`answers/pt-BR/01_a_cache.ipynb`](../answers/pt-BR/01_a_cache.ipynb)" in portuguese.source
    assert "gabarito" in portuguese.source and "sem as saídas" in portuguese.source
    assert "make workbook-refresh NB=pt-BR/01_a_cache" in portuguese.source
    for folder, cell in (("", english), ("pt-BR", portuguese)):  # each link reaches the key from the copy's folder
        (link,) = [part.split(")")[0] for part in cell.source.split("](")[1:]]
        key = (repo / "workbook" / folder / link).resolve()
        assert key.is_relative_to((repo / "workbook").resolve())  # inside the folder JupyterLab serves
        assert key.read_bytes() == (repo / "notebooks" / folder / "01_a_cache.ipynb").read_bytes()  # outputs and all
        assert key.stat().st_mode & 0o222 == 0  # read-only: JupyterLab opens it and never autosaves it
    assert nbformat.read(repo / "workbook" / "01_a_cache.ipynb", as_version=4).cells[1].source == "# 01 · A cache"


def test_the_answer_key_follows_the_committed_run(repo):
    _prepare(repo)
    committed, key = repo / "notebooks" / "01_a_cache.ipynb", repo / "workbook" / "answers" / "01_a_cache.ipynb"
    nb = nbformat.read(committed, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="a new run\n")]
    nbformat.write(nb, committed)
    _prepare(repo)
    assert key.read_bytes() == committed.read_bytes() and key.stat().st_mode & 0o222 == 0


def test_a_second_prepare_keeps_the_learners_copy_byte_for_byte(repo):
    _prepare(repo)
    mine = repo / "workbook" / "01_a_cache.ipynb"
    nb = nbformat.read(mine, as_version=4)
    nb.cells[2].source = "guess = 7  # my guess"
    nbformat.write(nb, mine)
    before = mine.read_bytes()
    assert _prepare(repo) == ["kept    workbook/01_a_cache.ipynb", "kept    workbook/pt-BR/01_a_cache.ipynb"]
    assert mine.read_bytes() == before
    (repo / "workbook" / "pt-BR" / "01_a_cache.ipynb").unlink()  # a deleted copy comes back; the others stay
    assert _prepare(repo) == ["kept    workbook/01_a_cache.ipynb", "created workbook/pt-BR/01_a_cache.ipynb"]
    assert mine.read_bytes() == before


def test_a_kept_copy_says_when_its_committed_notebook_changed(repo):
    _prepare(repo)
    nbformat.write(_notebook("print(43)"), repo / "notebooks" / "01_a_cache.ipynb")  # a `git pull`
    english, portuguese = _prepare(repo)
    assert english.startswith("kept    workbook/01_a_cache.ipynb (notebooks/01_a_cache.ipynb changed since")
    assert english.endswith("make workbook-refresh NB=01_a_cache)")
    assert portuguese == "kept    workbook/pt-BR/01_a_cache.ipynb"
    rerun = nbformat.read(repo / "notebooks" / "pt-BR" / "01_a_cache.ipynb", as_version=4)
    rerun.cells[1].outputs[0].text = "41\n"  # a re-run: other outputs, the same cells
    nbformat.write(rerun, repo / "notebooks" / "pt-BR" / "01_a_cache.ipynb")
    assert _prepare(repo)[1] == "kept    workbook/pt-BR/01_a_cache.ipynb"


def test_refresh_keeps_the_old_copy_beside_a_fresh_one(repo):
    _prepare(repo)
    mine = repo / "workbook" / "01_a_cache.ipynb"
    mine.write_text(mine.read_text().replace("guess = None", "guess = 7"))
    edited = mine.read_bytes()
    assert _refresh(repo, "01_a_cache") == [
        "refreshed workbook/01_a_cache.ipynb (your copy is kept as workbook/01_a_cache.old-2026-12-05T23-50-00.ipynb)"
    ]
    assert (repo / "workbook" / "01_a_cache.old-2026-12-05T23-50-00.ipynb").read_bytes() == edited
    fresh = nbformat.read(mine, as_version=4)
    assert fresh.cells[-1].source == "guess = None" and fresh.cells[0].id == workbook.NOTE_ID
    mine.write_text(mine.read_text().replace("guess = None", "guess = 8"))  # again in the same second: a new name
    second = mine.read_bytes()
    (line,) = _refresh(repo, "workbook/01_a_cache.ipynb")
    assert line.endswith("workbook/01_a_cache.old-2026-12-05T23-50-00-2.ipynb)")
    assert (repo / "workbook" / "01_a_cache.old-2026-12-05T23-50-00.ipynb").read_bytes() == edited
    assert (repo / "workbook" / "01_a_cache.old-2026-12-05T23-50-00-2.ipynb").read_bytes() == second
    assert _prepare(repo)[0] == "kept    workbook/01_a_cache.ipynb"  # an old copy is not a notebook to prepare


def test_refresh_of_a_missing_copy_creates_it(repo):
    assert _refresh(repo, "pt-BR/01_a_cache") == ["created   workbook/pt-BR/01_a_cache.ipynb"]
    assert not (repo / "workbook" / "01_a_cache.ipynb").exists()


@pytest.mark.parametrize("action", [_prepare, _refresh])
def test_an_unknown_name_is_refused_naming_the_valid_ones_and_nothing_is_written(repo, action):
    with pytest.raises(workbook.WorkbookError) as refused:
        action(repo, "01_a_cache", "01_a_cahce")
    assert "'01_a_cahce'" in str(refused.value) and "01_a_cache, pt-BR/01_a_cache" in str(refused.value)
    assert not (repo / "workbook").exists()


def test_refresh_names_something(repo):
    with pytest.raises(workbook.WorkbookError, match="--all"):
        _refresh(repo)


def test_the_command_line(repo, monkeypatch, capsys):
    monkeypatch.setattr(workbook, "NOTEBOOKS", repo / "notebooks")
    monkeypatch.setattr(workbook, "WORKBOOK", repo / "workbook")
    assert workbook.main([]) == 0  # prepare is the default
    assert capsys.readouterr().out.splitlines() == [
        "created workbook/01_a_cache.ipynb",
        "created workbook/pt-BR/01_a_cache.ipynb",
    ]
    assert workbook.main(["refresh", "--all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 and len(list((repo / "workbook").rglob("*.old-*"))) == 2
    with pytest.raises(SystemExit) as exited:
        workbook.main(["refresh", "02_nope"])
    assert exited.value.code == 2 and "the notebooks are: 01_a_cache, pt-BR/01_a_cache" in capsys.readouterr().err


def test_every_committed_notebook_gets_a_copy_without_outputs(tmp_path):
    """The real notebooks/ (English and pt-BR), into a workbook under tmp_path."""
    committed = sorted(workbook.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    twins = sorted((workbook.NOTEBOOKS / "pt-BR").glob("[0-9][0-9]_*.ipynb"))
    assert committed and twins
    lines = workbook.prepare(workbook=tmp_path / "workbook")
    assert len(lines) == len(committed) + len(twins) and all(line.startswith("created ") for line in lines)
    for source in committed + twins:
        copy = tmp_path / "workbook" / source.relative_to(workbook.NOTEBOOKS)
        nb = json.loads(copy.read_text(encoding="utf-8"))
        code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
        assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code), copy
        original = json.loads(source.read_text(encoding="utf-8"))
        assert [c["source"] for c in nb["cells"][1:]] == [c["source"] for c in original["cells"]], copy
        assert "formats" not in nb["metadata"].get("jupytext", {}), copy
        note = "".join(nb["cells"][0]["source"])
        assert f"`notebooks/{source.relative_to(workbook.NOTEBOOKS).as_posix()}`" in note, copy
        link = note.split("](")[1].split(")")[0]  # relative to the copy's folder: it reaches the answer key
        assert (copy.parent / link).read_bytes() == source.read_bytes(), copy


def test_the_workbook_is_ignored_by_git(tmp_path):
    """The repository's .gitignore names workbook/, so a prepared checkout stays clean (`git status --porcelain`)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("needs git")
    ignored = subprocess.run(
        [git, "check-ignore", "--no-index", "workbook/01_dynamic_cache.ipynb", "workbook/pt-BR/00_start_here.ipynb"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ignored.returncode == 0 and len(ignored.stdout.splitlines()) == 2, ignored.stderr
    checkout = tmp_path / "checkout"  # a repository with this .gitignore and one committed notebook
    (checkout / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", checkout / ".gitignore")
    nbformat.write(_notebook("print(42)"), checkout / "notebooks" / "01_a_cache.ipynb")
    quiet = ["-c", "user.name=kvlab", "-c", "user.email=kvlab@example.invalid", "-c", "commit.gpgsign=false"]
    for command in (["init", "-q"], ["add", "."], [*quiet, "commit", "-q", "-m", "notebooks"]):
        subprocess.run([git, *command], cwd=checkout, check=True, capture_output=True)
    workbook.prepare(notebooks=checkout / "notebooks", workbook=checkout / "workbook")
    assert (checkout / "workbook" / "01_a_cache.ipynb").is_file()
    status = subprocess.run([git, "status", "--porcelain", "--untracked-files=all"], cwd=checkout, capture_output=True)
    assert status.returncode == 0 and status.stdout == b""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_prepares_the_workbook_then_serves_it():
    """`make -n` (a dry run: nothing installed, written or started): `lab` prepares workbook/ and serves it, not
    notebooks/; `workbook-refresh` passes NB on."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (prepare,) = [i for i, line in enumerate(lines) if line.endswith("-m tools.workbook prepare")]
    (lab,) = [i for i, line in enumerate(lines) if " lab " in line and "jupyter" in line]
    assert prepare < lab and lines[lab].endswith(" workbook/")
    names = "NB=01_dynamic_cache pt-BR/01_dynamic_cache"
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "workbook-refresh", names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].endswith("-m tools.workbook refresh 01_dynamic_cache pt-BR/01_dynamic_cache")
