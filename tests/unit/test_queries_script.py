"""sql/<dialect>/queries.sql is what chokaq sends: regenerate it with `make scripts`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chokaq.storage.queries import render_queries

ROOT = Path(__file__).resolve().parents[2]
FILES = {"postgresql": "sql/postgres/queries.sql", "mssql": "sql/sqlserver/queries.sql"}
HOT_PATH = {"claim", "start", "heartbeat", "complete", "fail", "retry", "sweep_recover", "sweep_zombies"}


@pytest.mark.parametrize("dialect", sorted(FILES))
def test_queries_script_is_current(dialect: str) -> None:
    assert (ROOT / FILES[dialect]).read_text() == render_queries(dialect), f"{FILES[dialect]} is stale: make scripts"


@pytest.mark.parametrize("dialect", sorted(FILES))
def test_each_statement_is_a_named_block_saying_what_it_does(dialect: str) -> None:
    text = render_queries(dialect)
    blocks = re.findall(r"\n-- name: (\w+)\n-- (.+)\n(?!--)", text)
    names = [name for name, _ in blocks]
    assert set(names) >= HOT_PATH and len(names) == len(set(names)) == text.count("-- name: ")
    assert all(what.strip() for _, what in blocks)


def test_the_sql_server_file_has_the_sql_server_shapes() -> None:
    text = render_queries("mssql")
    assert "UPDATE c SET" in text and "@moved" in text and "AS lease" in text and " LIMIT " not in text
    assert "RETURNING" not in text and "RETURNING" in render_queries("postgresql")
