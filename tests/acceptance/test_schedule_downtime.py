"""Downtime with real processes: a worker fires an every-second schedule, everything stops for more
than five slots, a new worker starts. The missed-slot policy decides what the gap gets: ``all`` fills
every slot of it (up to ``missed_max``), ``skip`` and ``latest`` fire none of the slots that were
missed by more than Schedules.MissedGrace (``latest`` fires the newest missed slot only when no
on-time slot fires with it, which the in-process test pins down), and no slot ever fires twice."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from chokaq.storage import Storage
from tests.acceptance.conftest import run_cli
from tests.acceptance.test_schedule_race import APP, slot_tags
from tests.helpers import wait_for

GRACE = 2.0  # Schedules.MissedGrace: a slot older than this at firing time was missed
DOWN = 8.0  # seconds with nothing running: more than five slots past the grace
ENV = {"CHOKAQ_SCHEDULES__POLL_INTERVAL": "0.1", "CHOKAQ_SCHEDULES__MISSED_GRACE": str(GRACE)}


def fired_slots(s: Storage) -> list[datetime]:
    tags = slot_tags(s)
    assert all(n == 1 for n in tags.values()), f"a slot fired twice: {tags}"
    return sorted(datetime.strptime(t.split("@", 1)[1], "%Y-%m-%dT%H:%M:%SZ") for t in tags)


@pytest.mark.parametrize("policy", ["all", "skip", "latest"])
def test_a_restart_after_downtime_does_what_the_missed_slot_policy_says(
    db_url: str, tmp_path: Path, workers: Any, policy: str
) -> None:
    assert run_cli(db_url, "db", "upgrade", "--app", APP).returncode == 0
    s = Storage(db_url)
    # missed_max well above the downtime: "all" must fill the whole gap, however slow the restart.
    env = {**ENV, "CHOKAQ_TEST_MISSED": policy, "CHOKAQ_TEST_MISSED_MAX": "100"}
    record = tmp_path / "record.txt"
    first = workers(db_url, record, "--app", APP, **env)
    wait_for(lambda: len(slot_tags(s)) >= 2, timeout=60, interval=0.1)
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0
    last = fired_slots(s)[-1]
    stopped = time.monotonic()
    # The downtime of the scenario: nothing runs, slots pass unfired.
    wait_for(lambda: time.monotonic() - stopped >= DOWN, timeout=DOWN + 5, interval=0.1)
    restarted = datetime.now(UTC).replace(tzinfo=None)
    second = workers(db_url, record, "--app", APP, **env)
    wait_for(lambda: fired_slots(s)[-1] >= restarted + timedelta(seconds=2), timeout=60, interval=0.1)
    second.send_signal(signal.SIGTERM)
    assert second.wait(60) == 0

    after = [slot for slot in fired_slots(s) if slot > last]
    # Slots surely missed: due before the restart by more than the grace, whenever the new worker
    # first looked (it looks after the restart).
    missed = [last + timedelta(seconds=i) for i in range(1, int(DOWN))]
    missed = [slot for slot in missed if slot < restarted - timedelta(seconds=GRACE + 0.5)]
    assert len(missed) >= 5
    if policy == "all":
        expected = [last + timedelta(seconds=i) for i in range(1, int((after[-1] - last).total_seconds()) + 1)]
        assert after == expected, "every slot of the downtime fired once"
    else:
        assert not set(missed) & set(after), f"{policy}: slots missed by more than the grace fired"
        assert after, "slots on time after the restart fire"
