"""The learner's workbook: a copy of every committed notebook without its outputs, in `workbook/` (git-ignored).

The committed notebooks keep every output: they are the reference run, the answer key, and opening them shows each
prediction's answer before the learner makes it. So `make lab` serves `workbook/` instead: `notebooks/NN_name.ipynb`
-> `workbook/NN_name.ipynb`, `notebooks/pt-BR/NN_name.ipynb` -> `workbook/pt-BR/NN_name.ipynb`, each with its code
cells' outputs and execution counts cleared, its jupytext pairing dropped (a save writes the .ipynb alone, never a
script into notebooks/), the committed run's stamps and widget state dropped, and a first cell, in the notebook's
language, that links to its answer key: `workbook/answers/NN_name.ipynb`, the committed notebook with every output,
copied read-only into the served folder (JupyterLab opens it and never saves it), rewritten as the committed run
changes.

    python -m tools.workbook [prepare] [NOTEBOOK ...]        # add the copies that are missing (make workbook, make lab)
    python -m tools.workbook refresh NOTEBOOK ... | --all    # a fresh copy; the learner's one is kept beside it

A copy that exists is never overwritten by `prepare`: the learner's edits survive `make lab` and `git pull` (a kept
copy whose committed notebook changed since says so). `refresh` first saves the learner's copy beside it as
`NN_name.old-<local date and time>.ipynb` (shown in JupyterLab's file browser, never deleted here), then writes the
fresh copy. A NOTEBOOK is `01_dynamic_cache` or `pt-BR/01_dynamic_cache` (a `workbook/` or `notebooks/` prefix and
an `.ipynb` suffix are allowed). Every file is written atomically (`kvlab.atomic`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import nbformat

from kvlab.atomic import write_bytes, write_text
from kvlab.errors import KvlabUserError

ROOT = Path(__file__).resolve().parents[1]  # the repository
NOTEBOOKS = ROOT / "notebooks"
WORKBOOK = ROOT / "workbook"
PATTERN = "[0-9][0-9]_*.ipynb"
ANSWERS = "answers"  # workbook/answers/: the committed notebooks, outputs and all, read-only (the answer keys)
NOTE_ID = "kvlab-workbook-note"  # the first cell's id (ids are unique in a notebook; the committed ones are hex)
SOURCE = "source_sha256"  # metadata.kvlab_workbook[SOURCE]: `digest` of the committed notebook the copy was made from

# One note per language folder under notebooks/ ("" is notebooks/ itself, in English).
NOTES = {
    "": (
        "**Your workbook copy.** This is your copy of `{stem}`, without outputs: run it, make each prediction before "
        "the cell that measures it, edit it as you like; `make lab` never overwrites it. The reference run with every "
        "output (the answer key) is [`{answer}`]({link}), a read-only copy of the committed notebook `{committed}`: "
        "open it after you have made your guesses. For a fresh copy: `make workbook-refresh NB={key}` "
        "(or `python -m tools.workbook refresh {key}`); this copy is then kept beside it as "
        "`{stem}.old-<date>.ipynb`."
    ),
    "pt-BR": (
        "**Sua cópia de trabalho.** Esta é a sua cópia de `{stem}`, sem as saídas: execute as células, faça cada "
        "previsão antes da célula que a mede e edite à vontade; o `make lab` nunca a sobrescreve. A execução de "
        "referência, com todas as saídas (o gabarito), é [`{answer}`]({link}), uma cópia somente leitura do notebook "
        "do repositório `{committed}`: abra-o depois de fazer os seus palpites. Para uma cópia nova: "
        "`make workbook-refresh NB={key}` (ou `python -m tools.workbook refresh {key}`); esta cópia fica guardada "
        "ao lado, como `{stem}.old-<data>.ipynb`."
    ),
}


class WorkbookError(KvlabUserError, ValueError):
    """A notebook name that is not one of the committed notebooks (the message lists them); nothing was written."""


def committed(notebooks: Path = NOTEBOOKS) -> dict[str, Path]:
    """Every committed notebook by its key: `01_dynamic_cache` (English), `pt-BR/01_dynamic_cache` (a twin)."""
    found = {}
    for folder in NOTES:
        for path in sorted((notebooks / folder).glob(PATTERN)):
            found[f"{folder}/{path.stem}" if folder else path.stem] = path
    return found


def key(name: str) -> str:
    """A name as the learner may type it (`workbook/01_dynamic_cache.ipynb`, `notebooks/pt-BR/01_x`) -> its key."""
    text = name.strip().replace("\\", "/").removeprefix("./")
    for prefix in ("workbook/", "notebooks/"):
        text = text.removeprefix(prefix)
    return text.removesuffix(".ipynb")


def select(names: Sequence[str], notebooks: Path = NOTEBOOKS) -> dict[str, Path]:
    """The committed notebooks `names` name (all of them for no names); an unknown name is refused, listing the
    valid ones, before anything is written."""
    found = committed(notebooks)
    if not names:
        return found
    unknown = [name for name in names if key(name) not in found]
    if unknown:
        raise WorkbookError(
            f"no committed notebook named {', '.join(map(repr, unknown))}; the notebooks are: {', '.join(found)}"
        )
    return {key(name): found[key(name)] for name in names}


def digest(nb) -> str:
    """sha256 of a committed notebook's cells (kinds and sources, not outputs: a re-run changes nothing a copy holds).
    A copy records its notebook's, so `prepare` can tell when the committed text or code changed since (a `git pull`).
    """
    cells = json.dumps([[cell.cell_type, cell.source] for cell in nb.cells], ensure_ascii=False)
    return hashlib.sha256(cells.encode("utf-8")).hexdigest()


def clean(source: Path, name: str) -> str:
    """The workbook copy of the committed notebook `source` (key `name`), as text: no outputs, no
    execution counts, no pairing, no record of the committed run, and the note linking to its answer key."""
    nb = nbformat.read(source, as_version=4)
    made_from = digest(nb)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # the committed run's timings
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    pairing = nb.metadata.get("jupytext", {})
    pairing.pop("formats", None)  # no paired script: jupytext in JupyterLab writes the .ipynb alone
    if not pairing:
        nb.metadata.pop("jupytext", None)
    nb.metadata.pop("kvlab", None)  # the committed run's stamps (its code digest, its figures' texts)
    nb.metadata.pop("widgets", None)  # the committed run's widget state
    nb.metadata["kvlab_workbook"] = {SOURCE: made_from}
    folder, _, stem = name.rpartition("/")
    note = NOTES[folder].format(
        key=name,
        stem=stem,
        committed=f"notebooks/{name}.ipynb",
        answer=f"{ANSWERS}/{name}.ipynb",
        link=Path(os.path.relpath(f"{ANSWERS}/{name}.ipynb", folder or ".")).as_posix(),  # from the copy's folder
    )
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(note, id=NOTE_ID))
    return nbformat.writes(nb) + "\n"  # nbformat.write's own layout, as tools.notebook_exec writes


def answer_key(workbook: Path, name: str) -> Path:
    """Where the answer key of notebook `name` lies in the served folder: `workbook/answers/pt-BR/01_x.ipynb`."""
    return workbook / ANSWERS / f"{name}.ipynb"


def write_answer_key(source: Path, workbook: Path, name: str) -> None:
    """The committed notebook, byte for byte, read-only in `workbook/answers/`: JupyterLab (which serves workbook/
    alone, so that no save reaches a tracked file) opens it and never autosaves it. Rewritten on every `prepare`: the
    learner does not edit it, and it follows the committed run."""
    target = answer_key(workbook, name)
    data = source.read_bytes()
    if target.exists() and target.read_bytes() == data:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(target, data)  # os.replace: a read-only old key is replaced like any file
    os.chmod(target, 0o444)


def _shown(path: Path, workbook: Path) -> str:
    return path.relative_to(workbook.parent).as_posix()


def _changed_since(copy: Path, source: Path) -> bool:
    """Whether the committed notebook changed since `copy` was made from it (an unreadable copy: not known, no)."""
    try:
        made_from = nbformat.read(copy, as_version=4).metadata.get("kvlab_workbook", {}).get(SOURCE)
    except (OSError, ValueError):  # nbformat's NotJSONError and validation errors are ValueErrors
        return False
    return made_from is not None and made_from != digest(nbformat.read(source, as_version=4))


def prepare(names: Sequence[str] = (), notebooks: Path = NOTEBOOKS, workbook: Path = WORKBOOK) -> list[str]:
    """Write the workbook copy of each named committed notebook (all for none) that is missing; keep every copy that
    exists, byte for byte. Returns one line per notebook: created or kept."""
    lines = []
    for name, source in select(names, notebooks).items():
        write_answer_key(source, workbook, name)
        target = workbook / f"{name}.ipynb"
        if target.exists():
            line = f"kept    {_shown(target, workbook)}"
            if _changed_since(target, source):
                line += f" (notebooks/{name}.ipynb changed since; a fresh copy: make workbook-refresh NB={name})"
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text(target, clean(source, name))
            line = f"created {_shown(target, workbook)}"
        lines.append(line)
    return lines


def old_copy(target: Path, now: time.struct_time | None = None) -> Path:
    """A free name beside `target` for the learner's copy: `NN_name.old-2026-12-05T23-50-00.ipynb` (`-2`, `-3`...
    after it when that name is taken)."""
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", now or time.localtime())
    candidate, number = target.with_name(f"{target.stem}.old-{stamp}.ipynb"), 1
    while candidate.exists():
        number += 1
        candidate = target.with_name(f"{target.stem}.old-{stamp}-{number}.ipynb")
    return candidate


def refresh(
    names: Sequence[str], notebooks: Path = NOTEBOOKS, workbook: Path = WORKBOOK, now: time.struct_time | None = None
) -> list[str]:
    """Replace the workbook copies of the named notebooks with fresh ones, each existing copy first written, byte for
    byte, beside it (`old_copy`); every fresh copy is made before the first file is written. One line per notebook."""
    if not names:
        raise WorkbookError("name the notebooks to refresh (e.g. 01_dynamic_cache, pt-BR/01_dynamic_cache) or --all")
    copies = [(name, source, clean(source, name)) for name, source in select(names, notebooks).items()]
    lines = []
    for name, source, fresh in copies:
        write_answer_key(source, workbook, name)
        target = workbook / f"{name}.ipynb"
        if target.exists():
            kept = write_bytes(old_copy(target, now), target.read_bytes())  # the learner's copy first, then the new
            write_text(target, fresh)
            lines.append(f"refreshed {_shown(target, workbook)} (your copy is kept as {_shown(kept, workbook)})")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text(target, fresh)
            lines.append(f"created   {_shown(target, workbook)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.workbook",
        usage="%(prog)s [prepare] [NOTEBOOK ...] | refresh (NOTEBOOK ... | --all)",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("words", nargs="*", metavar="NOTEBOOK", help="e.g. 01_dynamic_cache, pt-BR/01_dynamic_cache")
    parser.add_argument("--all", action="store_true", help="refresh: every notebook")
    args = parser.parse_args(argv)
    action, names = "prepare", list(args.words)
    if names and names[0] in ("prepare", "refresh"):
        action = names.pop(0)
    if args.all and (action != "refresh" or names):
        parser.error("--all goes with refresh alone: `refresh --all`")
    try:
        if action == "prepare":
            lines = prepare(names, NOTEBOOKS, WORKBOOK)
        else:
            lines = refresh(list(committed(NOTEBOOKS)) if args.all else names, NOTEBOOKS, WORKBOOK)
    except WorkbookError as err:
        parser.error(str(err))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
