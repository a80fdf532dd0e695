"""How a worker rides out an unreachable database: one clock of how long it has been away,
one log line per retry interval, and the health that `chokaq health`
reads (Storage.OutageTolerance, Execution.HealthFile)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path

__all__ = ["HEALTH_STALE_SECONDS", "Outage", "read_health"]
log = logging.getLogger("chokaq.outage")

# A health file older than this was left by a worker that is gone or stuck.
HEALTH_STALE_SECONDS = 60.0


class Outage:
    """Whether the database answers, as one worker sees it. Every database call reports here."""

    def __init__(self, tolerance: float, health_file: str | None = None, worker_id: str = "") -> None:
        self.tolerance = tolerance
        self.health_file = Path(health_file) if health_file else None
        self.worker_id = worker_id
        self.down_since: float | None = None
        self.failures = 0
        self._last_log = 0.0
        self._reported_unhealthy = False

    @property
    def down_for(self) -> float:
        return 0.0 if self.down_since is None else time.monotonic() - self.down_since

    def over_budget(self) -> bool:
        return self.down_since is not None and self.down_for > self.tolerance

    def failed(self, what: str, exc: BaseException, retry_in: float | None = None) -> None:
        now = time.monotonic()
        first = self.down_since is None
        if first:
            self.down_since = now
        self.failures += 1
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        # One line per retry interval at most, however many paths are failing at once.
        if first or now - self._last_log >= max(retry_in or 0.0, 1.0):
            self._last_log = now
            log.warning(
                "database unreachable for %.1fs (%s: %s)%s; riding it out for up to %.0fs",
                self.down_for,
                what,
                reason,
                f", retrying in {retry_in:.1f}s" if retry_in is not None else "",
                self.tolerance,
            )
        if self.over_budget() and not self._reported_unhealthy:
            self._reported_unhealthy = True
            log.error(
                "database unreachable for %.0fs, over Storage.OutageTolerance (%.0fs): no more claims, "
                "reporting unhealthy; finished outcomes are kept and retried",
                self.down_for,
                self.tolerance,
            )
            self.write_health()

    def succeeded(self) -> None:
        if self.down_since is None:
            return
        log.warning("database reachable again after %.1fs (%d failed calls)", self.down_for, self.failures)
        self.down_since = None
        self.failures = 0
        self._reported_unhealthy = False
        self.write_health()

    # ------------------------------------------------------------------ health
    def status(self) -> str:
        if self.over_budget():
            return "unhealthy"
        return "degraded" if self.down_since is not None else "ok"

    def write_health(self) -> None:
        """Replace the health file atomically (the health check may read it at any moment)."""
        if self.health_file is None:
            return
        body = {
            "status": self.status(),
            "worker": self.worker_id,
            "db_down_seconds": round(self.down_for, 1),
            "outage_tolerance": self.tolerance,
            "updated_unix": time.time(),
        }
        try:
            self.health_file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.health_file.parent, prefix=".chokaq-health")
            with os.fdopen(fd, "w") as f:
                json.dump(body, f)
            os.replace(tmp, self.health_file)
        except OSError as exc:  # health is advisory: never stop the worker over it
            log.warning("cannot write the health file %s: %s", self.health_file, exc)

    def clear_health(self) -> None:
        if self.health_file is not None:
            with contextlib.suppress(OSError):
                self.health_file.unlink(missing_ok=True)


def read_health(path: str) -> tuple[bool, str]:
    """``(healthy, reason)`` from a worker's health file. A missing file: no worker is running
    (starting up, or the container runs another command); the caller decides what that means."""
    try:
        body = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return True, "no worker health file"
    except (OSError, ValueError) as exc:
        return False, f"unreadable worker health file {path}: {exc}"
    age = time.time() - float(body.get("updated_unix", 0))
    if age > HEALTH_STALE_SECONDS:
        return False, f"worker health file not updated for {age:.0f}s (worker stuck or gone)"
    status = body.get("status")
    if status == "unhealthy":
        return False, (
            f"worker {body.get('worker')}: database unreachable for {body.get('db_down_seconds')}s, "
            f"over Storage.OutageTolerance ({body.get('outage_tolerance')}s)"
        )
    return True, f"worker {body.get('worker')}: {status}"
