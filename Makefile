# chokaq developer commands. `make dev` and `make test` work on a fresh machine with Python >= 3.11.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: dev test test-fast lint typecheck fmt scripts bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test]'
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

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

## Regenerate the plain DDL scripts under sql/ from the table definitions
scripts: $(STAMP)
	$(VENV)/bin/chokaq db script --dialect postgresql > sql/postgres/001_initial.sql
	$(VENV)/bin/chokaq db script --dialect mssql > sql/sqlserver/001_initial.sql

## Benchmarks (not run by CI): chokaq here, peers in their own venv
bench: $(STAMP)
	$(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache chokaq-dev.db*
