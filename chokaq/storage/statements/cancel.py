"""Cancelling a running job, as its worker sees it afterwards: which of its lost jobs an operator
cancelled (rather than the sweep or another worker taking them), and the note its DLQ row gets when
the handler finally stops."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, UnicodeText, Update, bindparam, func, literal_column, select, update
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.states import FailureReason
from chokaq.storage.schema import jobs_dlq
from chokaq.storage.sqlfuncs import ListParam, in_list

_CANCELLED: ColumnElement[Any] = literal_column(str(int(FailureReason.CANCELLED)))


@functools.cache
def cancelled_runs_statement() -> Select[Any]:
    """``(Id, AttemptCount)`` of the DLQ rows among ``cancel_ids`` that an operator cancelled while
    the worker ``cancel_worker`` held them. One list parameter, whatever the count (SQL Server's
    2,100-parameter limit); found by primary key."""
    d = jobs_dlq.c
    return select(d.Id, d.AttemptCount).where(
        in_list(d.Id, bindparam("cancel_ids", type_=ListParam(d.Id.type))),
        d.FailureReason == _CANCELLED,
        d.WorkerId == bindparam("cancel_worker", type_=d.WorkerId.type),
    )


@functools.cache
def stopped_note_statement() -> Update:
    """Appends ``note_text`` to the ErrorDetails of the cancelled run ``note_id`` at attempt
    ``note_attempt`` of worker ``note_worker``: when its handler finally stopped. Only that run's
    row: a row resurrected and dead again since is another run's."""
    d = jobs_dlq.c
    details = func.coalesce(d.ErrorDetails, literal_column("''"), type_=d.ErrorDetails.type)
    return (
        update(jobs_dlq)
        .where(
            d.Id == bindparam("note_id", type_=d.Id.type),
            d.WorkerId == bindparam("note_worker", type_=d.WorkerId.type),
            d.AttemptCount == bindparam("note_attempt", type_=d.AttemptCount.type),
            d.FailureReason == _CANCELLED,
        )
        .values(ErrorDetails=details + bindparam("note_text", type_=UnicodeText()))
    )
