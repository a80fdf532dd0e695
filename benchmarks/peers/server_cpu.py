"""CPU time the PostgreSQL server spends, read from ``/proc`` (Linux only).

On two shared cores, a queue's client CPU and the server's CPU compete: a system that is cheap in
Python but makes the server work harder is not cheaper. So every throughput round also reports the
server's CPU per job: the sum of ``utime + stime`` of every process whose ``comm`` is ``postgres``
(postmaster, backends, walwriter, checkpointer, autovacuum, ...), plus the postmaster's
``cutime + cstime``, which holds the CPU of backends that exited and were reaped during the phase
(a pool that recycles a connection would otherwise lose that backend's CPU).

Every other user of the same server is counted too (other sessions' test suites on this machine).
``db_seconds`` therefore also gives the share of backends whose process title names the benchmark
database (``postgres: 15/main: postgres bench_oban 127.0.0.1(5432) idle``), which excludes foreign
load but also the server's shared background processes (WAL writer, checkpointer).

Resolution is one clock tick (``SC_CLK_TCK``, 10 ms) per process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


@dataclass(frozen=True)
class ServerCpu:
    """One reading: cumulative CPU seconds of all postgres processes, and of the benchmark database's backends."""

    seconds: float
    db_seconds: float
    processes: int

    def __sub__(self, before: ServerCpu) -> ServerCpu:
        return ServerCpu(self.seconds - before.seconds, self.db_seconds - before.db_seconds, self.processes)


def _stat_fields(pid: str) -> tuple[bytes, list[bytes]] | None:
    """(comm, fields after comm) of /proc/<pid>/stat, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    open_paren, close_paren = data.find(b"("), data.rfind(b")")
    # comm may itself hold spaces or parentheses: it is whatever lies between the first '(' and the last ')'
    return data[open_paren + 1 : close_paren], data[close_paren + 2 :].split()


def _serves(pid: str, dbname: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            title = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return f" {dbname} " in title


def read_server_cpu(dbname: str | None = None) -> ServerCpu:
    """Cumulative CPU seconds of every postgres process on this machine (see the module docstring)."""
    total = mine = 0
    count = 0
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # not Linux: report nothing rather than fail the benchmark
        return ServerCpu(float("nan"), float("nan"), 0)
    for pid in pids:
        stat = _stat_fields(pid)
        if stat is None or stat[0] != b"postgres":
            continue
        fields = stat[1]
        # fields[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17
        own = int(fields[11]) + int(fields[12])
        total += own + int(fields[13]) + int(fields[14])
        count += 1
        if dbname and _serves(pid, dbname):
            mine += own
    return ServerCpu(total / _TICK, mine / _TICK if dbname else float("nan"), count)
