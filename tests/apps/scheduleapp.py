"""An app with a schedule firing every second, for the exactly-once race with real processes
(tests/acceptance/test_schedule_race.py). Its handler does nothing: the jobs are counted by the
tag each carries (the schedule and its slot), wherever they end up."""

from __future__ import annotations

from chokaq import ChokaQ

app = ChokaQ()


@app.job("tick_v1", queue="ticks")
def tick(payload: dict[str, object]) -> None:
    pass


app.schedule("every-second", "* * * * * *", job="tick_v1")
