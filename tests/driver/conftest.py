"""Storage on SQL Server, as far as the driver: the production engine with pyodbc.connect recorded."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from tests.driver.recording import Call, Recorder, RecordingCursor

MSSQL_URL = "mssql+pyodbc://app:secret@sql.example/chokaq?driver=ODBC+Driver+18+for+SQL+Server"


# Statements sent as text without types: the migration lock and the catalogue reads, whose text
# values are chokaq's own constants (a lock name, table names), one length each.
UNTYPED_TEXT = re.compile(r"sp_(get|release)applock|\bsys\.|dm_db_")


@pytest.fixture(autouse=True)
def driver_rules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every statement any driver test captures: its NULLs written into the text (a NULL parameter
    costs pyodbc a describe round trip even when typed: recording.py, test_no_null_parameters.py),
    and every text parameter declared with a length (one plan, whatever the values' lengths:
    test_text_lengths.py)."""
    broken: list[tuple[str, str, list[int]]] = []
    run = RecordingCursor._run

    def recorded(self: RecordingCursor, kind: str, sql: str, params: list[tuple[object, ...]]) -> None:
        run(self, kind, sql, params)
        call = self.connection.recorder.calls[-1]
        if call.nulls:
            broken.append(("NULL parameters", sql[:160], call.nulls))
        unsized = unsized_text(call)
        if unsized and not UNTYPED_TEXT.search(sql):
            broken.append(("text without a declared length", sql[:160], unsized))

    monkeypatch.setattr(RecordingCursor, "_run", recorded)
    yield
    assert not broken, broken


def unsized_text(call: Call) -> list[int]:
    """Positions of string parameters whose setinputsizes entry declares no length."""
    sizes = call.inputsizes or []
    out = []
    for i in range(call.param_count):
        if any(isinstance(p[i], str) for p in call.params):
            size = sizes[i] if i < len(sizes) else None
            if size is None or not isinstance(size[1], int):
                out.append(i)
    return out


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    import pyodbc  # a test dependency; needs libodbc (unixodbc), which .ci/run installs

    rec = Recorder()
    # The dialect calls pyodbc.connect(connection_string, **attrs): everything below it is ours.
    monkeypatch.setattr(pyodbc, "connect", rec.connect)
    return rec


@pytest.fixture
def mssql(recorder: Recorder) -> Iterator[Storage]:
    """A Storage on the production mssql+pyodbc engine, initialised (SQL Server 2022), record empty."""
    s = Storage(MSSQL_URL, settings=StorageSettings(transient_retries=0))
    with s.engine.connect():
        pass  # the dialect's first connect runs its start-up queries
    if s.tx.autocommit is not None:
        with s.tx.autocommit.connect():
            pass  # and the autocommit pool's connection its once-per-connection SET LOCK_TIMEOUT
        # Put in autocommit once, when it was made, never per statement.
        assert [c.value for c in recorder.calls if c.kind == "autocommit"] == [True]
    s.tx.executor.connect()  # and this thread's hot-path connection (storage/executor.py), the same way
    assert [c.value for c in recorder.calls if c.kind == "autocommit"] == [True, True]
    assert s.engine.dialect.server_version_info[:1] == (16,)
    recorder.clear()
    try:
        yield s
    finally:
        s.close()
