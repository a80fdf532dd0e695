# chokaq developer commands. `make dev` and `make test` work on a fresh machine with Python >= 3.11.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: dev test test-fast lint typecheck fmt scripts api-reference bench clean requirements requirements-check docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test,docs]'
	touch $(STAMP)

## Run the engine, the admin API and the Deck on embedded SQLite (http://127.0.0.1:7071/deck)
dev: $(STAMP)
	$(VENV)/bin/chokaq dev

## Install what the tests need and run them all (PostgreSQL tests skip without a server unless
## CHOKAQ_REQUIRE_POSTGRES=1; browser tests need Debian's chromium)
test: $(STAMP)
	$(PY) -m pytest -q -ra

test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -m "not browser" tests/unit tests/integration

## The live SQL Server suite (needs Docker and an ODBC driver: msodbcsql18, or MSSQL_ODBC_DRIVER=FreeTDS):
## SQL Server 2022 from docker-compose.yml, the chokaq database with RCSI, then the storage contract,
## migrations, worker, crash and admin tests against it ([mssql] cases; SQLite and PostgreSQL run in `make test`)
MSSQL_TESTS ?= tests/integration/test_storage_contract.py tests/integration/test_keys_contract.py \
	tests/integration/test_migrations.py tests/integration/test_worker.py tests/acceptance/test_crash.py tests/api
.PHONY: test-mssql test-mssql-here
test-mssql: $(STAMP)
	docker compose up -d sqlserver
	$(MAKE) test-mssql-here

## The same against a SQL Server already listening on 127.0.0.1:$${MSSQL_PORT:-1433} (CI's service container)
test-mssql-here: $(STAMP)
	$(PY) -m tests.live_mssql prepare
	CHOKAQ_TEST_MSSQL_URL="$$($(PY) -m tests.live_mssql url)" $(PY) -m pytest -q -ra -k mssql $(MSSQL_TESTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## The docs site (mkdocs.yml): docs/ plus the generated CLI and Python API references, into site/.
## --strict: a broken link, or a docs/*.md page missing from the nav, fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

## Format the tree as `make lint` checks it (ruff format)
fmt: $(STAMP)
	$(VENV)/bin/ruff format .

## Regenerate docs/admin-api.md's routes and schemas from the admin API's OpenAPI document
api-reference: $(STAMP)
	$(PY) -m chokaq.api.reference

## Regenerate the plain DDL scripts and the hot-path statements (queries.sql) under sql/
scripts: $(STAMP)
	$(VENV)/bin/chokaq db script --dialect postgresql > sql/postgres/001_initial.sql
	$(VENV)/bin/chokaq db script --dialect mssql > sql/sqlserver/001_initial.sql
	$(VENV)/bin/chokaq db script --dialect postgresql --queries > sql/postgres/queries.sql
	$(VENV)/bin/chokaq db script --dialect mssql --queries > sql/sqlserver/queries.sql

## requirements.txt for the Functions remote build: pyproject's dependencies plus the mssql, otel and
## azure extras, every package pinned with hashes, one lock for every Python from 3.11 (uv's universal
## resolution: where a version needs another pin, the line carries a marker, e.g. azure-functions 2.x
## on 3.13, which 1.26 refuses). The remote build's pip then only checks pins; it resolves nothing.
REQUIREMENTS_COMPILE = $(VENV)/bin/uv pip compile pyproject.toml --extra mssql --extra otel --extra azure \
	--universal --python-version 3.11 --generate-hashes --quiet \
	--custom-compile-command "make requirements"
requirements: $(STAMP)
	$(REQUIREMENTS_COMPILE) --upgrade -o requirements.txt

## Fails when requirements.txt is not what `make requirements` makes from pyproject.toml (uv keeps
## the existing pins as preferences, so only a pyproject change moves them).
requirements-check: $(STAMP)
	cp requirements.txt $(VENV)/requirements.check.txt
	$(REQUIREMENTS_COMPILE) -o $(VENV)/requirements.check.txt
	diff -u requirements.txt $(VENV)/requirements.check.txt

## Benchmarks (not run by CI): chokaq here, peers in their own venv (.venv-bench, never a runtime dep)
BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
BENCH_ARGS ?=
.PHONY: bench-peers bench-costs bench-profile

$(BENCH_STAMP): benchmarks/requirements-bench.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q -r benchmarks/requirements-bench.txt
	touch $(BENCH_STAMP)

## oban-py needs Python >= 3.12, so it gets a venv of its own. OBAN_PYTHON is the first python3.12 /
## python3.13 that runs (a pyenv shim runs only when its version is selected, so pyenv's own 3.12+ is
## tried too); when there is none, the venv is not made and compare.py prints a row saying so.
OBAN_VENV ?= .venv-bench-oban
OBAN_STAMP := $(OBAN_VENV)/.installed
OBAN_PYTHON ?= $(shell for p in python3.12 python3.13; do $$p -c 'import sys; print(sys.executable)' 2>/dev/null && exit; done; \
	v=$$(pyenv versions --bare 2>/dev/null | grep -E '^3\.1[2-9]' | head -1); \
	[ -n "$$v" ] && PYENV_VERSION=$$v python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
.PHONY: bench-oban-venv

$(OBAN_STAMP): benchmarks/requirements-bench-oban.txt
	@if [ -z "$(OBAN_PYTHON)" ]; then echo "no Python >= 3.12 found: oban-py will be skipped (set OBAN_PYTHON=/path/to/python3.12)"; \
	elif $(OBAN_PYTHON) -m venv $(OBAN_VENV) && $(OBAN_VENV)/bin/pip install -q -U pip \
	  && $(OBAN_VENV)/bin/pip install -q -r benchmarks/requirements-bench-oban.txt; then touch $(OBAN_STAMP); \
	else rm -rf $(OBAN_VENV); echo "installing oban-py failed: it will be skipped (see the output above)"; fi

bench-oban-venv: $(OBAN_STAMP)

## chokaq (PostgreSQL + SQLite) vs pgqueuer vs oban-py vs procrastinate + database baseline, fresh and
## analysed tables, interleaved rounds (473 s with the defaults on the loaded 2-core machine; see benchmarks/README.md)
bench: $(STAMP) $(BENCH_STAMP) $(OBAN_STAMP)
	$(PY) benchmarks/compare.py --bench-python $(BENCH_VENV)/bin/python --oban-python $(OBAN_VENV)/bin/python $(BENCH_ARGS)

## one chokaq round under cProfile (all threads): per-job CPU by component
bench-profile: $(STAMP)
	$(PY) benchmarks/throughput.py --profile $(BENCH_ARGS)

## the peers alone, in their venv
bench-peers: $(BENCH_STAMP) $(OBAN_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/peers/db_baseline.py
	$(BENCH_VENV)/bin/python benchmarks/peers/pgqueuer_bench.py
	$(BENCH_VENV)/bin/python benchmarks/peers/procrastinate_bench.py
	if [ -x $(OBAN_VENV)/bin/python ]; then $(OBAN_VENV)/bin/python benchmarks/peers/oban_bench.py; fi

## costs that must stay flat: sweep, fetch, DLQ paging/preview at 1k/100k/1M rows; heartbeats
bench-costs: $(STAMP)
	$(PY) benchmarks/costs.py all $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-func-worker site .pytest_cache .mypy_cache .ruff_cache chokaq-dev.db*
