# Gavel: `make run` (the whole console on the embedded default) and `make test` (every test).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed

.PHONY: install run test fuzz lint format bench bench-quick migrate clean browser-deps gateway-deps \
	screenshots

$(STAMP): pyproject.toml sdk/pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) is required (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]" -e "./sdk[test]"
	touch $(STAMP)

install: $(STAMP)

migrate: install
	DEBUG=$${DEBUG-1} $(PY) manage.py migrate --verbosity 0

# The embedded default: SQLite under var/, the in-process channel layer, a demo tenant,
# a printed admin login and a simulated agent producing live runs and held calls.
# serve_demo checks the port first, then runs demo_setup; the logins are printed once.
run: migrate
	@DEBUG=$${DEBUG-1} HOST=$(HOST) PORT=$(PORT) $(PY) manage.py serve_demo

# axe-core for the accessibility tests, from tests/browser/node's package-lock.json.
AXE := tests/browser/node/node_modules/axe-core/axe.min.js
$(AXE): tests/browser/node/package.json tests/browser/node/package-lock.json
	cd tests/browser/node && npm ci --ignore-scripts --no-audit --no-fund
	touch $(AXE)

browser-deps: $(AXE)

# The official TypeScript MCP client, for the gateway's interop test of MCP Tasks, from
# tests/gateway/node's package-lock.json.
MCP_TS := tests/gateway/node/node_modules/@modelcontextprotocol/sdk/package.json
$(MCP_TS): tests/gateway/node/package.json tests/gateway/node/package-lock.json
	cd tests/gateway/node && npm ci --ignore-scripts --no-audit --no-fund
	touch $(MCP_TS)

gateway-deps: $(MCP_TS)

# TEST_WORKERS: pytest-xdist workers (each with its own test database, ports and Redis prefix;
# a module's tests stay on one worker); TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= 2
test: install browser-deps gateway-deps
	SECRET_KEY=$${SECRET_KEY-test-only-secret-key-not-for-production} \
	  $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# schemathesis on every operation of the served schema, once per key scope, against a live
# daphne on a PostgreSQL database of its own (DATABASE_URL must be PostgreSQL). Prints the seed;
# GAVEL_FUZZ_SEED=N replays it, GAVEL_FUZZ_EXAMPLES=N sets the cases per operation.
fuzz: install
	SECRET_KEY=$${SECRET_KEY-test-only-secret-key-not-for-production} \
	  $(PY) -m pytest -p no:cacheprovider -m fuzz tests/fuzz $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Benchmarks against real daphnes on PostgreSQL + Redis (the loopback ones unless DATABASE_URL /
# REDIS_URL say otherwise; each benchmark database is created when missing). `make bench`
# rewrites the summary in docs/benchmarks.md; `make bench-quick` (CI) runs every benchmark at
# small sizes to prove it still works, and writes nothing. BENCH=name runs one.
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gavel_bench
BENCH_REDIS_URL ?= redis://127.0.0.1:6379/0
bench: install
	DATABASE_URL=$${DATABASE_URL-$(BENCH_DATABASE_URL)} REDIS_URL=$${REDIS_URL-$(BENCH_REDIS_URL)} \
	  REDIS_PREFIX=$${REDIS_PREFIX-gavel-bench} $(PY) -m bench $(BENCH)

bench-quick: install
	DATABASE_URL=$${BENCH_QUICK_DATABASE_URL-postgres://postgres@127.0.0.1:5432/gavel_bench_quick} \
	  REDIS_URL=$${REDIS_URL-$(BENCH_REDIS_URL)} REDIS_PREFIX=gavel-bench-quick-$$$$ \
	  $(PY) -m bench --quick $(BENCH)

# Every page at 1440 px and 390 px, light and dark, as each persona:
# docs/screenshots/<page>-<width>-<light|dark>.png; the desk and the card page with a realistic
# queue (desk-*-<width>-<light|dark>.png); and the pages' screenshots the README links (the
# browser tests that take them, with GAVEL_DOCS_SCREENSHOTS=1).
DOC_SHOTS = tests/browser/test_desk_screens.py tests/browser/test_pages.py \
  tests/browser/test_budgets.py tests/browser/test_rules.py tests/browser/test_api_docs.py \
  tests/browser/test_manage_directory.py tests/browser/test_manage_keys.py \
  tests/browser/test_manage_audit_page.py
screenshots: install browser-deps
	SECRET_KEY=$${SECRET_KEY-test-only-secret-key-not-for-production} GAVEL_SCREENSHOTS=docs/screenshots \
	  $(PY) -m pytest -p no:cacheprovider tests/browser/test_page_tour.py -k screenshots $(PYTEST_ARGS)
	SECRET_KEY=$${SECRET_KEY-test-only-secret-key-not-for-production} GAVEL_DOCS_SCREENSHOTS=1 \
	  $(PY) -m pytest -p no:cacheprovider -n 0 $(DOC_SHOTS) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) var build .pytest_cache .ruff_cache
