# Two commands: `make lab` (set up, open the learner's workbook) and `make test` (set up, run the whole suite).
# Re-running either skips what is done: the venv, the install (until pyproject.toml changes), the models.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.kvlab-installed
# Every recipe, and every process the suite starts, finds the venv's tools first: the venv's ninja, not the system's,
# builds optimum-quanto's extension (two ninjas take turns rebuilding it from scratch, about a minute each time).
export PATH := $(CURDIR)/$(BIN):$(PATH)
# torch is installed first, pinned, so that kvlab's own requirement (`torch>=2.7`) finds it and pulls nothing more.
# Which build `torch==2.13.0` gives depends on the index pip uses: the default Linux wheel on PyPI bundles CUDA
# (several GB); the registry this project's CI machines use serves the CPU build. Choose with TORCH (any pip
# requirement or a wheel path) and TORCH_INDEX (an index URL, e.g. a CPU-only or a CUDA-version index).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
# JupyterLab refuses to start as root (Docker images, Colab-like machines) unless told it may.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)
PYTEST_ARGS ?=
# The suite runs in JOBS worker processes (pytest-xdist), one test file (or notebook) per worker at a time. Each
# process, notebook kernels included, keeps to OMP_NUM_THREADS torch threads: two workers with two threads each
# on a 2-core machine would fight over the cores and run slower than one.
JOBS ?= 2
TEST_THREADS ?= 1

.PHONY: lab workbook workbook-refresh test test-browser test-pt-br test-all test-extras test-zoo lint install models extensions browser notebooks clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)")
	$(BIN)/pip install --quiet -e ".[lab,explore,models,test]"
	touch $@

install: $(INSTALLED)

models: install
	$(BIN)/kvlab models prepare all

# optimum-quanto compiles its C++ extension on first use (about a minute on 2 cores, once per machine and torch):
# built here, with the venv's ninja, so that no notebook, run or test waits for it (a built one loads in a second).
extensions: install
	$(BIN)/python -c "from kvlab.caches.quantized import ensure_quanto_extension; ensure_quanto_extension()"

# The learner's workbook (tools/workbook.py): workbook/ (git-ignored) gets a copy of each committed notebook, English
# and pt-BR, without outputs; a copy that exists is never overwritten. The committed notebooks keep every output: the
# reference run, the answer key.
workbook: install
	$(BIN)/python -m tools.workbook prepare

# A fresh copy of the named notebooks (NB=01_dynamic_cache, NB="01_dynamic_cache pt-BR/02_static_cache", NB=--all);
# each old copy is kept beside it first, as NN_name.old-<date and time>.ipynb.
workbook-refresh: install
	$(BIN)/python -m tools.workbook refresh $(NB)

# Serves JupyterLab on the workbook (127.0.0.1) and prints its URL (with a token); Ctrl-C twice stops it. Only the
# ignored workbook/ is served: nothing JupyterLab saves is a tracked file.
lab: models extensions workbook
	$(BIN)/jupyter lab --config=jupyter_server_config.py --ServerApp.ip=127.0.0.1 $(LAB_ARGS) workbook/

# Headless Chromium for the Cache Explorer's browser tests (Debian's package; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || bash .ci/install-chromium || echo "WARNING: chromium could not be installed; browser tests will be skipped"

# One formatter, one linter (ruff, with limits on a function's size), a dead-code check (vulture) and a type check
# of recording/ and caches/ (mypy), pinned in the test extra, settings in pyproject.toml: a violation fails `make test`.
lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/vulture
	$(BIN)/mypy kvlab/recording kvlab/caches

# The suite: unit and integration tests, the README's blocks and the English notebooks under nbval. The Explorer in
# Chromium and the Portuguese notebooks (the same code, re-executed with its labels translated) are steps of their
# own, like the zoo and the extras: CI runs every step (.ci/run), `make test-all` runs them here.
test: lint models extensions
	OMP_NUM_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest -n $(JOBS) --dist loadfile \
		-m 'not packaging_extras and not zoo and not browser' --ignore=notebooks/pt-BR $(PYTEST_ARGS)

# The Cache Explorer and the notebooks' live controls driven in headless Chromium (Playwright), about 2 minutes.
test-browser: models extensions browser
	OMP_NUM_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest -n $(JOBS) --dist loadfile -m browser tests/browser/ $(PYTEST_ARGS)

# The pt-BR twins under nbval (their outputs, printed in Portuguese), about 4 minutes.
test-pt-br: models extensions
	OMP_NUM_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest -n $(JOBS) --dist loadfile notebooks/pt-BR/ $(PYTEST_ARGS)

# Every step CI runs, in its order.
test-all: test test-browser test-pt-br test-extras test-zoo

# Each extra on its own (models, explore, lab): the wheel installed with that extra alone into a fresh venv, its entry
# point run (`kvlab explore` rendered in Chromium). About 2 minutes, so a step of its own (.ci/run runs it).
test-extras: install browser
	OMP_NUM_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest -m packaging_extras tests/packaging/ $(PYTEST_ARGS)

# The architecture zoo: every model type of the installed transformers built tiny, generating plainly and under
# kvlab.watch (dynamic and static caches), its trace and `kvlab size` checked against the bytes its cache holds.
# Two worker processes; prints the counts and writes test-artifacts/zoo.json. A CI step of its own (.ci/run).
test-zoo: install
	OMP_NUM_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest -m zoo tests/zoo/ $(PYTEST_ARGS)

# Re-executes every committed notebook in place, the English ones and then their pt-BR twins, one at a time, each
# stamped with the code its outputs came from (tools/notebook_exec.py; tests/test_notebook_truth.py checks it).
# Run it on a quiet machine, nothing else running: the notebooks print timings, and a busy CPU turns them to noise.
# Full runs (KVLAB_QUICK is unset for them); 02 compiles (KVLAB_COMPILE=1) so its compile section is measured.
notebooks: models
	@set -e; for nb in notebooks/[0-9][0-9]_*.ipynb notebooks/pt-BR/[0-9][0-9]_*.ipynb; do \
		case $$nb in */02_*) options="--env KVLAB_COMPILE=1";; *) options="";; esac; \
		env -u KVLAB_QUICK OMP_NUM_THREADS=2 $(BIN)/python -m tools.notebook_exec $$nb $$options; \
	done

clean-venv:
	rm -rf $(VENV)
