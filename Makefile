# The two commands of the README: `make demo` (the main job) and `make test`.
# Both create .venv when missing, install only what changed, and are quick on a second run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: demo test lint typecheck unit services bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Reinstalled only when the project's metadata changes (the package is installed editable).
$(VENV)/.stamp-dev: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[dev]'
	@touch $@

$(VENV)/.stamp-demo: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	@touch $@

demo: $(VENV)/.stamp-demo
	$(BIN)/python examples/walkthrough.py

services:
	@scripts/services.sh

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.stamp-dev
	$(BIN)/pyright

unit: $(VENV)/.stamp-dev services
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(VENV)/.stamp-dev services
	$(BIN)/python bench/bench_turn.py
	$(BIN)/python bench/bench_storage.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
