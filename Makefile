# phazec: `make run` and `make test` each install everything they need on a fresh clone.
PYTHON ?= python3
PORT ?= 5000
DOCS_PORT ?= 8000
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.phazec-installed
SOURCES := pyproject.toml CMakeLists.txt $(wildcard ext/*.cpp ext/src/*.cpp ext/include/phazec/*.hpp)

.DEFAULT_GOAL := help
.PHONY: help setup run test test-quick stress fuzz lint bench ui docs docs-serve clean

help:  ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

# torch's CPU build, pinned with its local label so that pip can never take a CUDA build instead: from
# the package sources pip is configured with if they hold it, else from PyTorch's CPU index.
TORCH := torch==2.13.0+cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

$(STAMP): $(SOURCES)
	@echo "== [1/5] virtual environment $(VENV) ($(PYTHON) -m venv)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "== [2/5] pip, upgraded"
	$(BIN)/pip install -q --upgrade pip
	@echo "== [3/5] $(TORCH): torch's CPU build (about 200 MB, no CUDA packages), from your package sources or $(TORCH_CPU_INDEX)"
	$(BIN)/pip install -q "$(TORCH)" 2>/dev/null || $(BIN)/pip install -q "$(TORCH)" --extra-index-url $(TORCH_CPU_INDEX)
	@echo "== [4/5] build tools: scikit-build-core, nanobind"
	$(BIN)/pip install -q "scikit-build-core>=0.11,<2" "nanobind>=2.4,<4"
	@echo "== [5/5] phazec, compiling its C++ extension, with transformers, onnx, hydra, mlflow, HiGHS, Gurobi, ray and the dev tools (pip install -e .[dev]; a few minutes)"
	$(BIN)/pip install -q --no-build-isolation -e ".[dev]"
	touch $(STAMP)
	@echo "== installed: $(BIN)/phazec, $(BIN)/phazec-plan, $(BIN)/phazec-ir (or . $(BIN)/activate)"

setup: $(STAMP)  ## Create .venv and install phazec with its C++ extension (torch's CPU build first), saying each step

run: setup  ## Install, then run the default search (Llama2-7B over PHAZE's tpu_area space)
	$(BIN)/phazec

# The suite's test files spread over TEST_WORKERS processes (pytest-xdist, a file's tests in one of them):
# CI's 2 cores run it in about 0.56 of the time one process takes. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: setup  ## Install, then run the test suite (make test TEST_WORKERS=4: four processes; 0: one)
	$(PYTEST) --durations=25

test-quick: setup  ## The suite without the `slow` tests (full-depth exports, the wheel install)
	$(PYTEST) -m "not slow"

stress: setup  ## Install, then run the property tests on 8 times CI's examples, drawn afresh (make stress SEED=7: replay one draw)
	PHAZEC_PROPERTY_SCALE=$${PHAZEC_PROPERTY_SCALE:-8} $(PYTEST) -q -m property $(if $(SEED),--hypothesis-seed=$(SEED),)

fuzz: setup  ## Install, then run the fuzz tests with many more examples than CI draws
	PHAZEC_FUZZ_EXAMPLES=$${PHAZEC_FUZZ_EXAMPLES:-300} $(BIN)/python -m pytest tests/test_fuzz.py -q

lint: setup  ## ruff (lint and format check), mypy --strict and the import contracts (lint-imports)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: setup  ## Run every benchmark under bench/ (each prints its figure)
	@for script in bench/bench_*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

# One worker and no job runner (MLflow's background jobs for GenAI scorers, which phazec never uses):
# the dashboard starts in seconds where four workers and the runner took minutes on a loaded machine.
ui: setup  ## MLflow dashboard of the default store (./phazec.db) on http://127.0.0.1:5000 (make ui PORT=5001: another port)
	@echo "== MLflow's dashboard of $(CURDIR)/phazec.db on http://127.0.0.1:$(PORT) (one worker; open it once 'Uvicorn running' shows)"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/phazec.db \
		--host 127.0.0.1 --port $(PORT) --workers 1

docs: setup  ## Build the docs site into build/site (mkdocs build --strict)
	$(BIN)/mkdocs build --strict -d build/site

docs-serve: setup  ## Serve the docs on http://127.0.0.1:8000 with live reload (make docs-serve DOCS_PORT=8001: another port)
	$(BIN)/mkdocs serve -a 127.0.0.1:$(DOCS_PORT)

clean:  ## Remove the venv, build trees, caches and run outputs
	rm -rf $(VENV) build outputs multirun phazec.db mlartifacts .pytest_cache .mypy_cache .ruff_cache .hypothesis
