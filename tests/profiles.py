"""The database profiles the storage contract runs on: one list, one entry per database.

As River runs one conformance suite against every driver (``riverdrivertest.Exercise``), the
contract modules below take the fixture ``db_url`` (tests/conftest.py), which is parametrized over
the live profiles of :data:`PROFILES` and names each case after its profile
(``test_enqueue_and_read_back[postgres]``). SQLite and PostgreSQL run here; SQL Server runs live
only when ``CHOKAQ_TEST_MSSQL_URL`` names a server (``make test-mssql``). Without one, its arm is
the capture at the driver: what each contract operation sends to pyodbc, checked per operation in
``tests/driver/test_conformance.py``.

The names are the keys the fixtures and the test ids use: ``sqlite``, ``postgres``, ``mssql``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MSSQL_URL = os.environ.get("CHOKAQ_TEST_MSSQL_URL")

# The storage contract: every case in them that takes ``storage`` or ``db_url`` runs once per profile.
CONTRACT_MODULES = (
    "tests/integration/test_storage_contract.py",
    "tests/integration/test_keys_contract.py",
)


@dataclass(frozen=True)
class Profile:
    name: str  # the test id, and the key the fixtures make a database by
    live: bool  # whether a server for it runs in this session
    captured_in: str | None = None  # where what it is sent is checked at the driver, without a server


PROFILES = (
    Profile("sqlite", live=True),
    Profile("postgres", live=True),
    Profile("mssql", live=MSSQL_URL is not None, captured_in="tests/driver/test_conformance.py"),
)

LIVE = tuple(p.name for p in PROFILES if p.live)
