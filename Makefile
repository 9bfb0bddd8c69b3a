# phazec: `make run` and `make test` each install everything they need on a fresh clone.
PYTHON ?= python3
PORT ?= 5000
DOCS_PORT ?= 8000
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.phazec-installed
SOURCES := pyproject.toml CMakeLists.txt $(wildcard ext/*.cpp ext/src/*.cpp ext/include/phazec/*.hpp)

.DEFAULT_GOAL := help
.PHONY: help setup run test test-quick fuzz lint bench ui docs docs-serve clean

help:  ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

$(STAMP): $(SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q "scikit-build-core>=0.11,<2" "nanobind>=2.4,<4"
	$(BIN)/pip install -q --no-build-isolation -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)  ## Create .venv and install phazec with its C++ extension (torch CPU first)

run: setup  ## Install, then run the default search (Llama2-7B over PHAZE's tpu_area space)
	$(BIN)/phazec

test: setup  ## Install, then run the test suite
	$(BIN)/python -m pytest --durations=25

test-quick: setup  ## The suite without the `slow` tests (full-depth exports, the wheel install)
	$(BIN)/python -m pytest -m "not slow"

fuzz: setup  ## Install, then run the fuzz tests with many more examples than CI draws
	PHAZEC_FUZZ_EXAMPLES=$${PHAZEC_FUZZ_EXAMPLES:-300} $(BIN)/python -m pytest tests/test_fuzz.py -q

lint: setup  ## ruff (lint and format check), mypy --strict and the import contracts (lint-imports)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: setup  ## Run every benchmark under bench/ (each prints its figure)
	@for script in bench/bench_*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

ui: setup  ## MLflow dashboard of the default store (./phazec.db) on http://127.0.0.1:5000 (make ui PORT=5001: another port)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/phazec.db --host 127.0.0.1 --port $(PORT)

docs: setup  ## Build the docs site into build/site (mkdocs build --strict)
	$(BIN)/mkdocs build --strict -d build/site

docs-serve: setup  ## Serve the docs on http://127.0.0.1:8000 with live reload (make docs-serve DOCS_PORT=8001: another port)
	$(BIN)/mkdocs serve -a 127.0.0.1:$(DOCS_PORT)

clean:  ## Remove the venv, build trees, caches and run outputs
	rm -rf $(VENV) build outputs multirun phazec.db mlartifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis
