"""Capped exponential backoff with jitter: the wait before a retry, for the worker riding out an
unreachable database and for the storage's LISTEN connection alike."""

from __future__ import annotations

import random

BACKOFF_BASE = 0.1
BACKOFF_CAP = 5.0


def backoff(attempt: int, *, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> float:
    """Capped exponential delay before retry ``attempt`` (0-based), with jitter so workers that
    lost the database together do not all knock at once when it returns."""
    return float(min(cap, base * 2 ** min(attempt, 30)) * (0.5 + random.random() / 2))
