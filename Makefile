# One entry point for everything a developer or CI does. `make test` works on a fresh clone:
# it creates the virtual environment and installs what it needs first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Node tooling (buf), pinned in tools/package-lock.json; reinstalled when the lockfile changes.
TOOLS_STAMP := tools/node_modules/.installed
BUF         := $(CURDIR)/tools/node_modules/.bin/buf
# The TypeScript client, pinned in its package-lock.json; reinstalled when the lockfile changes.
TS_DIR   := clients/typescript
TS_STAMP := $(TS_DIR)/node_modules/.installed

.PHONY: install test unit lint typecheck rule-coverage run generate proto-lint ts-install ts-test \
	clean bench bench-smoke system-deps

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e clients/python -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

$(TOOLS_STAMP): tools/package.json tools/package-lock.json
	npm ci --prefix tools --ignore-scripts --no-audit --no-fund
	touch $(TOOLS_STAMP)

$(TS_STAMP): $(TS_DIR)/package.json $(TS_DIR)/package-lock.json
	npm ci --prefix $(TS_DIR) --ignore-scripts --no-audit --no-fund
	touch $(TS_STAMP)

ts-install: $(TS_STAMP)

# The API contract: buf lint (STANDARD + COMMENTS) and buf format, both on proto/, and buf
# breaking against the image of the last release (proto/releases/; offline, works on any clone).
PROTO_RELEASE := releases/v0.1.0.binpb
proto-lint: $(TOOLS_STAMP)
	cd proto && $(BUF) lint
	cd proto && $(BUF) format --diff --exit-code
	cd proto && $(BUF) breaking --against $(PROTO_RELEASE)

# Regenerate the checked-in client code from proto/: Python in
# clients/python/src/promptadmission/v1, TypeScript in clients/typescript/src/gen.
# tests/test_generated_code.py fails when either is stale.
generate: install $(TS_STAMP)
	PYTHON=$(BIN)/python scripts/generate.sh
	PYTHON=$(BIN)/python scripts/generate-ts.sh

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy service/admission_service tests examples
	$(BIN)/mypy --strict -p promptadmission

# The projection and series modules must stay at 100% statement and branch coverage. The domain's
# tests run on every core (their property tests take 600 examples each under CI=true); pytest-cov
# combines the workers' data before the report.
rule-coverage: install
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist load tests/unit/domain \
		--cov=admission_service.domain --cov-branch --cov-report=
	$(BIN)/coverage report --show-missing --fail-under=100 \
		--include='*/domain/projection.py,*/domain/series.py'

# The TypeScript client's strict tsc build (dist/), redone only when a source, the generated
# code or the configuration changed: `make test-db` after `make test` does not build it again.
TS_SOURCES := $(shell find $(TS_DIR)/src $(TS_DIR)/test $(TS_DIR)/examples -name '*.ts' 2>/dev/null) \
	$(TS_DIR)/tsconfig.json $(TS_DIR)/package.json
TS_BUILT   := $(TS_DIR)/dist/.built
$(TS_BUILT): $(TS_STAMP) $(TS_SOURCES)
	cd $(TS_DIR) && npm run --silent build
	touch $(TS_BUILT)

.PHONY: ts-build
ts-build: $(TS_BUILT)

# The TypeScript client's tests against a real server they start (this venv's
# admission-service; DATABASE_URL's server or the embedded PostgreSQL).
ts-test: install $(TS_BUILT)
	cd $(TS_DIR) && PAS_SERVICE_BIN=$(CURDIR)/$(BIN)/admission-service npm test --silent

# The benchmark (issue 7, docs/BENCHMARKS.md): the service against the floor measured in the
# same run, on a database of its own (DATABASE_URL's server, else an embedded PostgreSQL).
# `bench` is the full run (about 10 minutes) and writes bench/results/latest.json; `bench-smoke`
# runs every scenario briefly and only checks that the benchmark works (it asserts no timing).
bench: install
	$(BIN)/python -m bench

bench-smoke: install
	$(BIN)/python -m bench --smoke --out bench/results/smoke.json > /dev/null

# nginx and pgbouncer for the deployment tests (tests/deploy/), from Debian's packages when
# missing (apt-get; a no-op once they are installed).
system-deps:
	@scripts/install-system-deps.sh

# The real image and docker-compose.yml under a real Docker engine (tests/compose/): installs
# Debian's docker.io, docker-compose and mmdebstrap when missing, starts dockerd when none runs,
# builds stand-ins for the official base images (no registry is reachable; cached), the image,
# brings the topology up and checks it through the balancer, then tears it down. Needs root.
# The TypeScript client's build is for its check through the balancer (a 1M-token session).
.PHONY: compose-test
compose-test: install $(TS_BUILT)
	PAS_REQUIRE_TYPESCRIPT=1 VENV_BIN=$(CURDIR)/$(BIN) scripts/compose-test.sh

# The reliability suite (issue 6, docs/RELIABILITY.md): load, contention, cancellation, lost
# responses, database outage, process crash, hostile input and resource bounds against the real
# server and PostgreSQL, each ending with the audit. `make test` runs it at the `ci` size (a
# few minutes); `reliability-full` is the run whose figures docs/RELIABILITY.md reports (about
# 20 minutes, 7 of them the fuzzer's; figures in .data/reliability-full.jsonl, printed as
# Markdown at the end).
RELIABILITY_REPORT := .data/reliability-full.jsonl
.PHONY: reliability reliability-full
reliability: install
	$(BIN)/pytest -q tests/reliability

reliability-full: install
	mkdir -p .data && rm -f $(RELIABILITY_REPORT)
	PAS_RELIABILITY_PROFILE=full PAS_RELIABILITY_REPORT=$(CURDIR)/$(RELIABILITY_REPORT) \
		$(BIN)/pytest -q --timeout=7200 tests/reliability
	$(BIN)/python -m tests.reliability.report $(RELIABILITY_REPORT)

# Scale-out on a real distributed engine (issue 16, docs/SCALING.md). `citus-build` builds
# Citus from the vendored source (CITUS_TARBALL, default ../shared/vendor/ beside the repository)
# into the embedded PostgreSQL, once per virtual environment. `citus-test` starts a local
# cluster (a coordinator and two workers on loopback, torn down afterwards, also on failure) and
# runs on it: the distribution and router-plan tests, the reliability harness across both
# workers with one restarted, the API guarantees and bounds, and the cross-language test.
# The first of: beside this checkout (../shared/vendor), the workplace's shared folder.
CITUS_SOURCES := $(CURDIR)/../shared/vendor/citus-14.0.1.tar.gz /work/shared/vendor/citus-14.0.1.tar.gz
CITUS_TARBALL ?= $(firstword $(wildcard $(CITUS_SOURCES)) $(CITUS_SOURCES))
CITUS_REPORT  := .data/citus-test.jsonl
CITUS_PLANS   := .data/citus-router-plans.txt
.PHONY: citus-build citus-test
citus-build: install
	CITUS_TARBALL=$(CITUS_TARBALL) PYTHON=$(CURDIR)/$(BIN)/python scripts/build-citus.sh

citus-test: citus-build $(TS_STAMP)
	cd $(TS_DIR) && npm run --silent build
	mkdir -p .data && rm -f $(CITUS_REPORT)
	PAS_TEST_CITUS=1 PAS_REQUIRE_TYPESCRIPT=1 PAS_RELIABILITY_REPORT=$(CURDIR)/$(CITUS_REPORT) \
		PAS_CITUS_PLANS=$(CURDIR)/$(CITUS_PLANS) $(BIN)/pytest -q -p no:cacheprovider \
		tests/citus tests/api/test_guarantees.py tests/api/test_bounded_growth.py \
		tests/integration/test_held_frames.py tests/integration/test_frame_chunks.py \
		tests/integration/test_held_bodies.py \
		tests/clients/test_cross_language.py
	$(BIN)/python -m tests.reliability.report $(CITUS_REPORT)

# The tests run on every core (pytest-xdist): one pytest worker per core, each with its own
# randomly named databases (and, without DATABASE_URL, its own embedded server); a module's tests
# stay on one worker, so its module-scoped fixtures are built once. The tests marked `serial`
# (tests/reliability: latency and resource bounds measured inside the test) run afterwards,
# alone. TEST_WORKERS=1 runs everything in one process.
TEST_WORKERS ?= auto
# A worker that dies (a test past its timeout ends its process) ends the run, naming the test:
# pytest-xdist 3.8 replacing it under loadfile left the run waiting forever once.
PARALLEL     := -n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0

# The fast loop: the pure tests and the tests on the in-memory fake (tests/unit, the fake half of
# the storage contract); no PostgreSQL, no server (tests/conftest.py refuses a database fixture
# under tests/unit). Tens of seconds.
unit: install
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) -m "not database" tests/unit tests/contract

# The whole suite: proto, lint, types, rule coverage, the TypeScript client, the benchmark's
# smoke run, then every test (domain, storage, API, clients, the compose topology as local
# processes; the cross-language tests need the TypeScript build), in parallel, then the serial
# ones. tests/unit/domain ran once already, under rule-coverage.
test: proto-lint lint typecheck rule-coverage ts-test bench-smoke system-deps
	PAS_REQUIRE_TYPESCRIPT=1 $(BIN)/pytest -q $(PARALLEL) -m "not serial" --ignore=tests/unit/domain
	PAS_REQUIRE_TYPESCRIPT=1 $(BIN)/pytest -q -m serial --ignore=tests/unit/domain

# What depends on the database, for a second run on another PostgreSQL (CI runs `make test`
# on the embedded server, then `DATABASE_URL=… make test-db`): the TypeScript client's tests
# (on the build `make test` left, rebuilt only if a source changed), the benchmark's smoke run
# and every test using a database fixture (marked `database` by tests/conftest.py). No lint,
# types, pure unit tests or package builds: they cannot differ between servers (the packed
# TypeScript client's test builds the package twice and only calls the server to prove it runs).
.PHONY: test-db
test-db: ts-test bench-smoke system-deps
	PAS_REQUIRE_TYPESCRIPT=1 $(BIN)/pytest -q $(PARALLEL) -m "database and not serial" \
		--ignore=tests/clients/test_typescript_package.py
	PAS_REQUIRE_TYPESCRIPT=1 $(BIN)/pytest -q -m "database and serial" \
		--ignore=tests/clients/test_typescript_package.py

run: install
	$(BIN)/admission-service serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
