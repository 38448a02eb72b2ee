# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv first.
# `make test-fast` runs the unit tier only.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup lint format test test-fast demo bench clean

# torch is pinned to the CPU build that lies on local disk (a bare `torch` would pull CUDA).
$(STAMP): pyproject.toml scripts/setup-system.sh
	bash scripts/setup-system.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: setup
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# Every tier, slow tests included (what CI runs).
test: lint
	$(PY) -m pytest -q

# The quick loop: pure-code unit tier only, on both cores (pytest-xdist), under a minute.
test-fast: setup
	$(PY) -m pytest -q -n 2 -m "not slow" tests/unit

demo: setup
	bash scripts/demo.sh

bench: setup
	$(VENV)/bin/fleetrl bench engine

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
