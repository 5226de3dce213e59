# Two commands: `make lab` (set up, open the notebooks) and `make test` (set up, run the whole suite).
# Re-running either skips what is done: the venv, the install (until pyproject.toml changes), the models.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.kvlab-installed
# The CPU wheel of torch; installed first, because a bare `torch` requirement pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: lab test install models browser clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

install: $(INSTALLED)

models: install
	$(BIN)/kvlab models prepare all

lab: models
	$(BIN)/jupyter lab notebooks/

# Headless Chromium for the Cache Explorer's browser tests (Debian's package; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || bash .ci/install-chromium || echo "WARNING: chromium could not be installed; browser tests will be skipped"

test: models browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
