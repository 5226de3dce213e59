# The Jupyter server settings `make lab` starts with (`jupyter lab --config=jupyter_server_config.py`).
#
# `make lab` serves workbook/, the learner's copies without outputs (tools/workbook.py), which holds no scripts. The
# committed notebooks are jupytext pairs, `NN_name.ipynb` and `NN_name.py` (notebooks/ and notebooks/pt-BR/): the
# script is what a diff and the tests read. Served directly (`jupyter lab notebooks/`), side by side, the file
# browser would show every notebook twice, so the scripts are left out of its listings. They stay where they are (the
# tests, the Makefile and the translations name their paths) and open by path; hide_globs only filters listings.
# The pattern is the pairs' names alone: any other .py under notebooks/ stays listed. The defaults (__pycache__,
# *.pyc...) are extended, not replaced.
c = get_config()  # noqa: F821 - traitlets defines get_config in the namespace of a config file
c.ContentsManager.hide_globs.extend(["[0-9][0-9]_*.py"])
