"""An app with a schedule firing every second, for the exactly-once race with real processes
(tests/acceptance/test_schedule_race.py). Its handler does nothing: the jobs are counted by the
tag each carries (the schedule and its slot), wherever they end up."""

from __future__ import annotations

import os

from chokaq import ChokaQ

app = ChokaQ()


@app.job("tick_v1", queue="ticks")
def tick(payload: dict[str, object]) -> None:
    pass


# CHOKAQ_TEST_MISSED and _MISSED_MAX: the missed-slot policy (tests/acceptance/test_schedule_downtime.py).
app.schedule(
    "every-second",
    "* * * * * *",
    job="tick_v1",
    missed=os.environ.get("CHOKAQ_TEST_MISSED", "latest"),  # type: ignore[arg-type]
    missed_max=int(os.environ.get("CHOKAQ_TEST_MISSED_MAX", "10")),
)
