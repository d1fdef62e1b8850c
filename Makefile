# mcp-host: the two commands are `make run` (set up and serve the demo) and `make test` (the whole suite).
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
HOST   ?= 127.0.0.1
PORT   ?= 8000
# daphne's listen backlog (Twisted's default, 50, drops connections of a burst; the kernel caps it at
# net.core.somaxconn). An IPv6 HOST needs its colons escaped (\:), as in any Twisted endpoint string.
BACKLOG ?= 1024
PYTEST_ARGS ?=
# Test processes (pytest-xdist; each has its own test database and Redis database, see tests/parallel.py). Most
# tests wait on real processes and sockets, so two processes overlap well even on two cores; 0 runs in one process.
TEST_PROCESSES ?= 2
XDIST := $(if $(filter 0,$(TEST_PROCESSES)),,-n $(TEST_PROCESSES) --dist loadfile)
# The Node packages of the end-to-end tests live outside the work tree, installed once per lock file.
NPM_HOME ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/mcp-host/npm
NODE_DIR := tests/e2e/node
export MCP_NPM_HOME := $(NPM_HOME)

.PHONY: install install-dev npm-tools lock run worker beat test test-embedded lint format migrations clean bench bench-floors bench-budgets

## The runtime only (requirements.txt): what `make run`, `make worker` and a deployment need.
$(VENV)/.installed: requirements.txt requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "mcp-host needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -c requirements.lock
	@touch $@

## Plus the tests, lint, type checking and benchmarks (requirements-dev.txt): what `make test` and CI need.
$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt -c requirements.lock
	@touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

## The conformance suite, the TypeScript SDK and Node 22 that the end-to-end tests run, pinned by
## $(NODE_DIR)/package-lock.json: `npm ci` into $(NPM_HOME), skipped while the installed lock is the same.
## Needs npm and the npm registry; `make test` never downloads anything itself.
npm-tools:
	@command -v npm >/dev/null || { echo "npm-tools: npm is needed (e.g. apt-get install npm)" >&2; exit 1; }
	@if cmp -s $(NODE_DIR)/package-lock.json $(NPM_HOME)/package-lock.json && [ -e $(NPM_HOME)/.installed ]; then \
	  echo "npm-tools: up to date in $(NPM_HOME)"; \
	else \
	  mkdir -p $(NPM_HOME) && rm -f $(NPM_HOME)/.installed && \
	  cp $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json $(NPM_HOME)/ && \
	  (cd $(NPM_HOME) && npm ci --no-audit --no-fund --loglevel=error) && touch $(NPM_HOME)/.installed; \
	fi

## Re-pin requirements.lock from requirements-dev.txt, which includes requirements.txt (newest versions within their
## ranges): one lock constrains both installs, so the runtime has the same versions with and without the tools.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip && .lock-venv/bin/pip install --quiet -r requirements-dev.txt
	{ echo "# Exact pins for the reference deployment and CI (pip install -r requirements.txt -c requirements.lock;"; \
	  echo "# development: -r requirements-dev.txt). Regenerate with: make lock"; \
	  .lock-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip=='; } > requirements.lock
	rm -rf .lock-venv

## Set up, migrate, create the demo tenant and serve with daphne on $(HOST):$(PORT).
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py mcp_demo --base-url http://$(HOST):$(PORT) --token-file .mcp-demo-token
	$(VENV)/bin/daphne -e tcp:port=$(PORT):interface=$(HOST):backlog=$(BACKLOG) mcp_host.asgi:application

## With REDIS_URL set: a Celery worker for worker calls (tools bound with execution "worker"), and beat (exactly one
## per deployment: the reaper of worker calls past their deadline, the purge). Without REDIS_URL, `make run` runs
## worker calls in-process and needs neither. WORKER_ARGS goes to celery, e.g. "--concurrency 8".
worker: install
	@test -n "$$REDIS_URL" || { echo "worker: set REDIS_URL (the broker); without it make run serves worker calls in-process" >&2; exit 1; }
	$(VENV)/bin/celery -A mcp_host worker --loglevel INFO $(WORKER_ARGS)

beat: install
	@test -n "$$REDIS_URL" || { echo "beat: set REDIS_URL (the broker)" >&2; exit 1; }
	$(VENV)/bin/celery -A mcp_host beat --loglevel INFO

## The whole suite against the configured services (DATABASE_URL / REDIS_URL), then, when services are
## configured, the transport and end-to-end tests once more on the embedded defaults (SQLite, in-memory layer).
test: install-dev npm-tools
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)
	@if [ -n "$$DATABASE_URL$$REDIS_URL" ]; then $(MAKE) --no-print-directory test-embedded; fi

test-embedded: install-dev
	env -u DATABASE_URL -u REDIS_URL -u MCP_REQUIRE_SERVICES $(PY) -m pytest $(XDIST) tests/transport tests/interaction tests/e2e $(PYTEST_ARGS)

## Ruff, formatting, migrations in sync, the import layers (import-linter contracts in pyproject.toml) and the
## type checker (mypy with the Django and DRF plugins; strict on most packages, see pyproject.toml).
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

format: install-dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

migrations: install
	$(PY) manage.py makemigrations mcp_app

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache db.sqlite3 staticfiles

## The side-by-side benchmark (see docs/performance.md): bare ASGI, Channels floor, the official SDK and mcp-host
## (daphne and uvicorn), each on one core. SQLite always; PostgreSQL + Redis too when DATABASE_URL and REDIS_URL
## are set. Prints markdown tables; BENCH_ARGS goes to bench/run.py, e.g. "--rounds 3 --markdown-out bench.md"
## or "--quick" (a 2-minute smoke run).
bench: install-dev
	$(PY) -m bench.run $(BENCH_ARGS)

## Issue 27's table in one command (see docs/performance.md): each call path of mcp-host beside its floor, measured
## in the same run, 3 interleaved rounds (about 15 minutes). Needs DATABASE_URL (PostgreSQL) and REDIS_URL.
## BENCH_ARGS goes to bench/floors.py, e.g. "--quick" or "--markdown-out floors.md --json-out floors.json".
bench-floors: install-dev
	$(PY) -m bench.floors $(BENCH_ARGS)

## The warm call with budgets on, beside the same call without them and the Channels floor (docs/performance.md,
## "Budgets on the warm call"), about 3 minutes. Needs DATABASE_URL (PostgreSQL) and REDIS_URL. BENCH_ARGS goes
## to bench/budgets.py, e.g. "--rates" (rate limits on in both states) or "--rounds 5".
bench-budgets: install-dev
	$(PY) -m bench.budgets $(BENCH_ARGS)
