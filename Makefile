# One entry point for everything a developer or CI does. `make test` works on a fresh clone:
# it creates the virtual environment and installs what it needs first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Node tooling (buf), pinned in tools/package-lock.json; reinstalled when the lockfile changes.
TOOLS_STAMP := tools/node_modules/.installed
BUF         := $(CURDIR)/tools/node_modules/.bin/buf

.PHONY: install test lint typecheck rule-coverage run generate proto-lint clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e clients/python -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

$(TOOLS_STAMP): tools/package.json tools/package-lock.json
	npm ci --prefix tools --ignore-scripts --no-audit --no-fund
	touch $(TOOLS_STAMP)

# The API contract: buf lint (STANDARD + COMMENTS) and buf format, both on proto/.
proto-lint: $(TOOLS_STAMP)
	cd proto && $(BUF) lint
	cd proto && $(BUF) format --diff --exit-code

# Regenerate the checked-in Python code in clients/python/src/promptadmission/v1 from proto/.
generate: install
	PYTHON=$(BIN)/python scripts/generate.sh

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy service/admission_service tests

# The projection and series modules must stay at 100% statement and branch coverage.
rule-coverage: install
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/domain \
		--cov=admission_service.domain --cov-branch --cov-report=
	$(BIN)/coverage report --show-missing --fail-under=100 \
		--include='*/domain/projection.py,*/domain/series.py'

# The whole suite: proto, lint, types, rule coverage, then every test (domain, storage, API).
test: proto-lint lint typecheck rule-coverage
	$(BIN)/pytest -q

run: install
	$(BIN)/admission-service serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
