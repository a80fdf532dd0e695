"""Storage on SQL Server, as far as the driver: the production engine with pyodbc.connect recorded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from tests.driver.recording import Call, Recorder, RecordingCursor

MSSQL_URL = "mssql+pyodbc://app:secret@sql.example/chokaq?driver=ODBC+Driver+18+for+SQL+Server"


@pytest.fixture(autouse=True)
def no_null_parameters(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every statement any driver test captures writes its NULLs into the text: a NULL parameter
    costs pyodbc a describe round trip even when typed (recording.py, test_no_null_parameters.py)."""
    bound: list[Call] = []
    run = RecordingCursor._run

    def recorded(self: RecordingCursor, kind: str, sql: str, params: list[tuple[object, ...]]) -> None:
        run(self, kind, sql, params)
        call = self.connection.recorder.calls[-1]
        if call.nulls:
            bound.append(call)

    monkeypatch.setattr(RecordingCursor, "_run", recorded)
    yield
    assert not bound, [(c.sql[:160], c.nulls) for c in bound]


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
