# One entry point for everything a developer or CI does. `make test` works on a fresh clone:
# it creates the virtual environment and installs what it needs first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test lint typecheck unit run generate clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e clients/python -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy service/admission_service tests

# The whole suite: lint, types, then every test (domain, storage, API) with coverage of the rule.
test: lint typecheck
	$(BIN)/pytest -q

run: install
	$(BIN)/admission-service serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
