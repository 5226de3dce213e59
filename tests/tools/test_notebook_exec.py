"""`tools.notebook_exec`: a notebook runs for real in a kernel, in its own directory, and is stamped with the code
that ran and with what the figure check found in its figures; a failing cell leaves the file untouched. Three
kernel starts in all (a few seconds each)."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tools.notebook_exec import (
    FIGURE_OVERFLOW,
    FIGURE_TEXTS,
    STAMP,
    NotebookExecutionError,
    _by_cell,
    code_digest,
    main,
)


def notebook(*code: str):
    return new_notebook(cells=[new_markdown_cell("# A title, 1,234")] + [new_code_cell(source) for source in code])


def test_the_digest_is_of_the_code_only():
    nb = notebook("x = 1", "print(x)")
    digest = code_digest(nb)
    nb.cells[0].source = "# Another title"
    nb.cells[1].source = "x = 1  \n\n"  # trailing whitespace: jupytext does not keep it stable
    assert code_digest(nb) == digest
    nb.cells[2].source = "print(x + 1)"
    assert code_digest(nb) != digest
    assert code_digest(notebook("a = 1", "b = 2")) != code_digest(notebook("a = 1\nb = 2"))  # cell boundaries count


def test_a_notebook_runs_in_its_directory_with_the_extra_environment_and_is_stamped(tmp_path):
    path = tmp_path / "tiny.ipynb"
    nb = notebook("import os\nvalue = os.environ['KVLAB_EXEC_TEST']", "print(value, os.getcwd())")
    nb.cells[1].metadata["execution"] = {"iopub.status.busy": "2020-01-01T00:00:00Z"}  # an older run's timing
    nbformat.write(nb, path)

    assert main([str(path), "--env", "KVLAB_EXEC_TEST=from --env"]) == 0

    ran = nbformat.read(path, as_version=4)
    assert ran.cells[2].outputs[0].text == f"from --env {os.path.realpath(tmp_path)}\n"
    assert [cell.execution_count for cell in ran.cells[1:]] == [1, 2]
    # the digest, the figure check's findings and the figures' texts (none: no figure), nothing that differs run to run
    assert ran.metadata["kvlab"] == {STAMP: code_digest(nb), FIGURE_OVERFLOW: [], FIGURE_TEXTS: []}
    assert all("execution" not in cell.metadata for cell in ran.cells)
    assert "KVLAB_EXEC_TEST" not in os.environ  # the setting went to the kernel only


FIGURES = (
    "from kvlab.plots._figure import subplots\n"
    "def panels(*titles):\n"
    "    fig, axes = subplots(1, len(titles), figsize=(8, 3), squeeze=False)\n"
    "    for ax, title in zip(axes[0], titles):\n"
    "        ax.set_title(title)\n"
    "    return fig"
)
LONG = "a title far too long for its figure, " * 6
LEFT, RIGHT = "the left panel's title, which runs on and on and on", "the right panel's title, which runs on and on too"


def test_the_figures_each_cell_shows_are_checked_and_the_outputs_stay_as_they_are(tmp_path):
    path = tmp_path / "figures.ipynb"
    nbformat.write(
        notebook(
            "%matplotlib inline",
            FIGURES,
            f"panels({LONG!r})",  # the cell's value: a bare Figure, as kvlab's plots return
            f"import matplotlib.pyplot as plt\nplt.plot([0, 1], [0, 1]); plt.title({LONG!r})",  # pyplot's: inline
            f"display(panels('fits'))\ndisplay(panels({LEFT!r}, {RIGHT!r}))",  # the second one shown
            "print('no figure')",
        ),
        path,
    )

    assert main([str(path)]) == 0

    ran = nbformat.read(path, as_version=4)
    assert ran.metadata["kvlab"][FIGURE_OVERFLOW] == [
        {"cell": 3, "figure": 0, "text": LONG, "kind": "outside", "axes": 0},
        {"cell": 4, "figure": 0, "text": LONG, "kind": "outside", "axes": 0},  # a pyplot figure too
        {"cell": 5, "figure": 1, "text": LEFT, "kind": "overlap", "axes": 0, "with": RIGHT},
    ]
    # every figure's texts, in the order shown: titles and labels, then one list of tick labels per axis, as drawn
    texts = ran.metadata["kvlab"][FIGURE_TEXTS]
    assert [(shown["cell"], shown["figure"], shown["texts"]) for shown in texts] == [
        (3, 0, [LONG]),
        (4, 0, [LONG]),
        (5, 0, ["fits"]),
        (5, 1, [LEFT, RIGHT]),
    ]
    assert texts[0]["ticks"] == 2 * [["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]]  # kvlab's number ticks
    assert texts[1]["ticks"][1] == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]  # pyplot's own formatter
    shown = [[output.output_type for output in cell.outputs] for cell in ran.cells[1:]]
    assert shown == [[], [], ["execute_result"], ["execute_result", "display_data"], 2 * ["display_data"], ["stream"]]
    assert ran.cells[6].outputs[0].text == "no figure\n"  # and no word of the check, nor of an error, anywhere
    figures = [ran.cells[3].outputs[0], ran.cells[4].outputs[1], *ran.cells[5].outputs]
    assert all(set(output.data) == {"image/png", "text/plain"} for output in figures)


def test_without_the_kernels_findings_the_run_is_refused(tmp_path):
    with pytest.raises(NotebookExecutionError, match="figure check did not start"):
        _by_cell(notebook("x = 1"), tmp_path / "never_written.json", tmp_path / "x.ipynb")


def test_a_failing_cell_leaves_the_file_untouched_and_names_the_cell(tmp_path, capsys):
    path, later = tmp_path / "broken.ipynb", tmp_path / "later.ipynb"
    nbformat.write(notebook("x = 1", "x / 0", "print('never')"), path)
    nbformat.write(notebook("y = 2"), later)
    before = path.read_bytes()

    assert main([str(path), str(later)]) == 1

    message = capsys.readouterr().err
    assert f"{path}: cell 2 ('x / 0') failed with ZeroDivisionError" in message and "unchanged" in message
    assert f"(not run: {later})" in message
    assert path.read_bytes() == before
    assert "kvlab" not in nbformat.read(later, as_version=4).metadata


def test_arguments_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.ipynb")])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "any.ipynb"), "--env", "NO_EQUALS_SIGN"])
