"""The rules operator actions share, written once for every surface (API, CLI, Functions) and for
the settings that start an app.

Only the domain below this: ``chokaq.settings`` imports it, so it must not import the app.
"""

from __future__ import annotations

from chokaq.domain.errors import JobValidationError
from chokaq.domain.states import FailureReason

# A zombie timeout below this many of the longest heartbeat interval calls healthy jobs dead:
# normal jitter or one slow heartbeat write would outlast it.
ZOMBIE_TIMEOUT_HEARTBEATS = 3

# The only bind addresses called loopback: the names docs/security.md promises. ``ipaddress``
# would also accept 127.0.0.2 or 0:0::1, which the Host check and `chokaq dev --open` then
# disagreed about; one short list is the rule both follow.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def zombie_timeout_floor(heartbeat_interval_max: float) -> float:
    """The shortest zombie timeout allowed with this ``Execution.HeartbeatIntervalMax``."""
    return ZOMBIE_TIMEOUT_HEARTBEATS * heartbeat_interval_max


def check_zombie_timeout(name: str, seconds: float, heartbeat_interval_max: float) -> None:
    """Refuse (``JobValidationError``, a ``ValueError``) a zombie timeout ``name`` below the floor."""
    floor = zombie_timeout_floor(heartbeat_interval_max)
    if seconds < floor:
        raise JobValidationError(
            f"{name} ({seconds:g}s) must be at least {ZOMBIE_TIMEOUT_HEARTBEATS}x Execution.HeartbeatIntervalMax "
            f"({heartbeat_interval_max:g}s), i.e. >= {floor:g}s; otherwise normal jitter or a slow database makes "
            "healthy jobs look dead"
        )


def parse_failure_reason(value: str | int | None) -> FailureReason | None:
    """A failure reason as an operator types it (``Zombie``, ``fatal_error``, ``6``); empty is none."""
    if value is None or value == "":
        return None
    try:
        return FailureReason.parse(value)
    except ValueError:
        names = ", ".join(r.label for r in FailureReason)
        last = max(FailureReason)
        raise JobValidationError(
            f"unknown failure reason {value!r}: use a number 0..{last.value} or one of {names}"
        ) from None


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine only."""
    return host in LOOPBACK_HOSTS
