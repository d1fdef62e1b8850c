# mcp-host: the two commands are `make run` (set up and serve the demo) and `make test` (the whole suite).
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=

.PHONY: install lock run test test-embedded lint format migrations clean bench

$(VENV)/.installed: requirements.txt requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "mcp-host needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -c requirements.lock
	@touch $@

install: $(VENV)/.installed

## Re-pin requirements.lock from requirements.txt (newest versions within its ranges).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip && .lock-venv/bin/pip install --quiet -r requirements.txt
	{ echo "# Exact pins for the reference deployment and CI (pip install -r requirements.txt -c requirements.lock)."; \
	  echo "# Regenerate with: make lock"; .lock-venv/bin/pip freeze --exclude-editable; } > requirements.lock
	rm -rf .lock-venv

## Set up, migrate, create the demo tenant and serve with daphne on $(HOST):$(PORT).
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py mcp_demo --base-url http://$(HOST):$(PORT)
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) mcp_host.asgi:application

## The whole suite against the configured services (DATABASE_URL / REDIS_URL), then, when services are
## configured, the transport and end-to-end tests once more on the embedded defaults (SQLite, in-memory layer).
test: install
	$(PY) -m pytest $(PYTEST_ARGS)
	@if [ -n "$$DATABASE_URL$$REDIS_URL" ]; then $(MAKE) --no-print-directory test-embedded; fi

test-embedded: install
	env -u DATABASE_URL -u REDIS_URL -u MCP_REQUIRE_SERVICES $(PY) -m pytest tests/transport tests/e2e $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

migrations: install
	$(PY) manage.py makemigrations mcp_app

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache db.sqlite3 staticfiles

## Benchmarks against real daphne processes, side by side with a bare ASGI baseline (see docs/performance.md).
## DATABASE_URL / REDIS_URL are passed through when set; BENCH_ARGS goes to bench/run.py, e.g. "--repeat 3".
bench: install
	$(PY) -m bench.run $(BENCH_ARGS)
