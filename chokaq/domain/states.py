from __future__ import annotations

from enum import IntEnum, StrEnum


class JobStatus(IntEnum):
    """Status of a row in the hot table. A finished job's outcome is the table that holds it."""

    PENDING = 0
    FETCHED = 1
    PROCESSING = 2


class FailureReason(IntEnum):
    """Why a job sits in the dead-letter table. Values match the original ChokaQ."""

    MAX_RETRIES_EXCEEDED = 0
    CANCELLED = 1
    ZOMBIE = 2
    CIRCUIT_BREAKER_OPEN = 3
    REJECTED = 4
    THROTTLED = 5
    FATAL_ERROR = 6
    TIMEOUT = 7
    TRANSIENT = 8
    HEARTBEAT_FAILURE = 9
    RETRY_LIFETIME_EXPIRED = 10

    @property
    def label(self) -> str:
        """PascalCase name as the original and the docs spell it (e.g. ``MaxRetriesExceeded``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, value: str | int) -> FailureReason:
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            return cls(int(value))
        wanted = value.replace("_", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == wanted:
                return member
        raise ValueError(f"unknown failure reason {value!r}")


class Location(StrEnum):
    HOT = "hot"
    ARCHIVE = "archive"
    DLQ = "dlq"
