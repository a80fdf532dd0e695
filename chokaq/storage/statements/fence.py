"""The fence: the predicate that lets a worker's statement touch only the jobs it still owns."""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import and_, bindparam, literal_column, or_
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Subquery

from chokaq.domain.models import Lease
from chokaq.storage.dialects import profile_of
from chokaq.storage.dialects.sqlserver_shapes import lease_rowset
from chokaq.storage.schema import jobs_hot
from chokaq.storage.sqlfuncs import ListParam, in_list


@functools.lru_cache(maxsize=2)
def lease(durations: bool = False) -> Subquery:
    """SQL Server's lease rowset (one object per shape, so a statement's columns and its fence
    name the same ``lease``); ``durations``: with each completed job's DurationMs."""
    return lease_rowset(jobs_hot.c.Id, durations=durations)


@functools.lru_cache(maxsize=32)
def fence(groups: int, status: int, durations: bool = False) -> ColumnElement[bool]:
    """JobsHot rows in ``status`` that a worker still owns at exactly the attempt each of its
    leases names.

    Bound by :func:`fence_params`. Leases are grouped by attempt number, so there is one
    statement per count of distinct attempts (nearly always one), not one per batch size.
    ``groups == 0`` is SQL Server's form: a join with one ``OPENJSON ... WITH (Id, Attempt)``
    rowset of all the leases, a primary-key seek per lease (an OR of IN-groups may be a scan);
    ``durations``: that rowset carries each job's DurationMs too (a completion's).
    """
    if groups < 0:
        raise ValueError("a fence needs at least one lease")
    hot = jobs_hot.c
    # "Status + 0", not "Status = n": the rows are found by primary key. A plain predicate
    # would let the planner scan a whole partial index (every Fetched or Processing job of
    # every worker) for a few ids whenever its statistics underestimate that index.
    owned = and_(
        (hot.Status + literal_column("0")) == literal_column(str(int(status))),
        hot.WorkerId == bindparam("fence_worker", type_=hot.WorkerId.type),
    )
    if groups == 0:
        rowset = lease(durations)
        return and_(hot.Id == rowset.c.Id, hot.AttemptCount == rowset.c.Attempt, owned)
    return and_(
        owned,
        or_(
            *(
                and_(
                    hot.AttemptCount == bindparam(f"fence_attempt_{i}", type_=hot.AttemptCount.type),
                    in_list(hot.Id, bindparam(f"fence_ids_{i}", type_=ListParam(hot.Id.type))),
                )
                for i in range(groups)
            )
        ),
    )


def fence_params(
    worker_id: str, leases: Iterable[Lease], dialect: str = "", durations: Mapping[str, int] | None = None
) -> tuple[int, dict[str, Any]]:
    """``(groups, parameters)`` for :func:`fence` on ``dialect`` (a name; none: id lists), whose
    profile says whether leases travel as one rowset (``groups == 0``) or as id lists per attempt.

    ``durations`` (a completion's, by job id): the third member of each lease in the rowset, or
    else the JSON object ``durations`` that the statement looks each job up in."""
    by_attempt: dict[int, list[str]] = defaultdict(list)
    for lease in leases:
        if lease.worker_id != worker_id:
            raise ValueError("all leases in one move must belong to one worker")
        by_attempt[lease.attempt].append(lease.job_id)
    params: dict[str, Any] = {"fence_worker": worker_id}
    if dialect and profile_of(dialect).lease_rowset:
        # One pair per job (a job named twice would be copied twice by a join).
        pairs = {job_id: attempt for attempt, ids in by_attempt.items() for job_id in ids}
        if durations is None:
            params["fence_leases"] = json.dumps([[job_id, attempt] for job_id, attempt in pairs.items()])
        else:
            rows = [[job_id, attempt, durations.get(job_id)] for job_id, attempt in pairs.items()]
            params["fence_leases"] = json.dumps(rows)
        return 0, params
    if durations is not None:
        params["durations"] = json.dumps(dict(durations))
    for i, (attempt, ids) in enumerate(by_attempt.items()):
        params[f"fence_attempt_{i}"] = attempt
        params[f"fence_ids_{i}"] = ids
    return len(by_attempt), params
