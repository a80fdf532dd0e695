"""Finding a job wherever it is, in one statement.

Three reads (hot, then DLQ, then archive) could all miss a job that moved between them (DLQ ->
hot by a resurrect while the reads ran): a racing resurrect answered 404 for a job that exists.
One ``UNION ALL`` statement reads the three tables in one snapshot (PostgreSQL, SQLite; SQL
Server under READ_COMMITTED_SNAPSHOT), so a job that exists is found where it is.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import CompoundSelect, Row, Table, bindparam, cast, literal, null, select, union_all
from sqlalchemy.types import TypeEngine

from chokaq.domain.models import JobRecord
from chokaq.domain.states import Location
from chokaq.storage.records import to_record
from chokaq.storage.schema import jobs_archive, jobs_dlq, jobs_hot
from chokaq.storage.sqlfuncs import ListParam, in_list

# In order of preference should a row ever be seen twice (it cannot within one snapshot).
TABLES: tuple[tuple[Location, Table], ...] = (
    (Location.HOT, jobs_hot),
    (Location.DLQ, jobs_dlq),
    (Location.ARCHIVE, jobs_archive),
)
LOCATION_COLUMN = "Location_"


@functools.cache
def get_job_statement() -> CompoundSelect[Any]:
    """``SELECT`` of every column any of the three tables has (NULL where a table lacks it), plus
    the table's name, for ``Id = :job_id``."""
    types: dict[str, TypeEngine[Any]] = {}
    for _, t in TABLES:
        for col in t.columns:
            types.setdefault(col.name, col.type)
    parts = []
    for loc, t in TABLES:
        cols = [t.c[name].label(name) if name in t.c else cast(null(), typ).label(name) for name, typ in types.items()]
        parts.append(select(literal(loc.value).label(LOCATION_COLUMN), *cols).where(t.c.Id == bindparam("job_id")))
    return union_all(*parts)


def record_from_union(rows: Sequence[Row[Any]]) -> JobRecord | None:
    by_location = {Location(r._mapping[LOCATION_COLUMN]): r for r in rows}
    for loc, t in TABLES:
        row = by_location.get(loc)
        if row is not None:
            # Only the columns this table has: the NULL fillers are not its values.
            own = {name: value for name, value in row._mapping.items() if name in t.c}
            return to_record(loc, SimpleNamespace(_mapping=own))
    return None


@functools.cache
def stored_ids_statement() -> CompoundSelect[Any]:
    """The ids among ``:stored_ids`` (a list) that are in any of the three tables: an enqueue
    replayed after a lost reply asks whether its first attempt committed, wherever its jobs have
    moved since (a fast job may already be archived)."""
    return union_all(
        *(
            select(t.c.Id).where(in_list(t.c.Id, bindparam("stored_ids", type_=ListParam(t.c.Id.type))))
            for _, t in TABLES
        )
    )
