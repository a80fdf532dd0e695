"""Schedules, without a database: slots in a real zone's DST transitions, missed-slot policies,
and declarations that must refuse to start."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from pydantic import BaseModel

from chokaq import ChokaQ
from chokaq.domain.schedules import ScheduleError, ScheduleSpec, describe, next_slot, plan_firing, slot_key

OSLO = "Europe/Oslo"
NEW_YORK = "America/New_York"


def slots(cron: str, tz: str, start: datetime, n: int) -> list[datetime]:
    out, at = [], start
    for _ in range(n):
        at = next_slot(cron, tz, at)
        out.append(at)
    return out


# Europe/Oslo, 2026: clocks spring forward at 01:00Z on 29 March (02:00 CET -> 03:00 CEST) and fall
# back at 01:00Z on 25 October (03:00 CEST -> 02:00 CET).


def test_a_slot_in_the_skipped_hour_is_skipped_not_moved() -> None:
    assert slots("30 2 * * *", OSLO, datetime(2026, 3, 27, 12), 3) == [
        datetime(2026, 3, 28, 1, 30),  # 02:30 CET
        datetime(2026, 3, 30, 0, 30),  # 29 March has no 02:30: next is the 30th, 02:30 CEST
        datetime(2026, 3, 31, 0, 30),
    ]


def test_every_minute_across_spring_forward_has_no_slot_in_the_gap() -> None:
    fired = slots("*/15 * * * *", OSLO, datetime(2026, 3, 29, 0, 30), 4)
    # 01:45 CET (00:45Z), then 03:00 CEST (01:00Z): the wall times 02:00-02:45 do not exist.
    assert fired == [
        datetime(2026, 3, 29, 0, 45),
        datetime(2026, 3, 29, 1, 0),
        datetime(2026, 3, 29, 1, 15),
        datetime(2026, 3, 29, 1, 30),
    ]


def test_a_slot_in_the_repeated_hour_fires_once() -> None:
    fired = slots("30 2 * * *", OSLO, datetime(2026, 10, 24, 12), 2)
    # 02:30 happens at 00:30Z (CEST) and again at 01:30Z (CET): one slot, the first.
    assert fired == [datetime(2026, 10, 25, 0, 30), datetime(2026, 10, 26, 1, 30)]


def test_the_second_pass_of_the_repeated_hour_fires_nothing_again() -> None:
    # After 02:45 CEST (00:45Z) the next quarter-hour slots are the CET 02:00.. again: fired already.
    fired = slots("*/15 * * * *", OSLO, datetime(2026, 10, 25, 0, 45), 2)
    assert fired == [datetime(2026, 10, 25, 2, 0), datetime(2026, 10, 25, 2, 15)]  # 03:00 and 03:15 CET


@pytest.mark.parametrize(
    ("cron", "due", "now"),
    [
        ("30 2 * * *", datetime(2026, 10, 25, 0, 30), datetime(2026, 10, 25, 1, 10)),  # nightly, fired at 02:10 CET
        ("*/15 * * * *", datetime(2026, 10, 25, 0, 45), datetime(2026, 10, 25, 1, 5)),  # 02:45 CEST due, 02:05 CET now
        ("*/15 * * * *", datetime(2026, 10, 25, 0, 45), datetime(2026, 10, 25, 1, 40)),
    ],
)
@pytest.mark.parametrize("grace", [60.0, 3600.0])
def test_a_firing_in_the_second_pass_of_the_repeated_hour_still_fires_the_due_slot(
    cron: str, due: datetime, now: datetime, grace: float
) -> None:
    # The wall clock has gone back (02:xx CET after 02:xx CEST): the due slot's wall time is later
    # than now's, yet the slot is past and due. It fires (as on time or as the latest missed one).
    for missed in ("latest", "all"):
        firing = plan_firing(cron, OSLO, due, now, missed, 10, grace)  # type: ignore[arg-type]
        assert firing.slots == [due], (missed, firing)
        assert firing.next_due > now


def test_new_york_transitions_too() -> None:
    # 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z); 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z).
    assert next_slot("30 2 * * *", NEW_YORK, datetime(2026, 3, 8, 0)) == datetime(2026, 3, 9, 6, 30)
    assert slots("30 1 * * *", NEW_YORK, datetime(2026, 10, 31, 12), 2) == [
        datetime(2026, 11, 1, 5, 30),  # 01:30 EDT, once
        datetime(2026, 11, 2, 6, 30),
    ]


def test_utc_and_seconds() -> None:
    start = datetime(2026, 1, 1, 0, 0, 0, 500_000)
    assert slots("*/20 * * * * *", "UTC", start, 3) == [
        datetime(2026, 1, 1, 0, 0, 20),
        datetime(2026, 1, 1, 0, 0, 40),
        datetime(2026, 1, 1, 0, 1, 0),
    ]


# ---------------------------------------------------------------------------- missed slots
DUE = datetime(2026, 1, 1, 0, 0)


def test_on_time_slots_all_fire_whatever_the_policy() -> None:
    now = DUE + timedelta(seconds=3.5)
    for policy in ("latest", "skip", "all"):
        plan = plan_firing("* * * * * *", "UTC", DUE, now, policy, 10, 60)  # type: ignore[arg-type]
        assert plan.slots == [DUE + timedelta(seconds=i) for i in range(4)], policy
        assert plan.next_due == DUE + timedelta(seconds=4) and plan.dropped == 0


def test_five_missed_slots_under_each_policy() -> None:
    # A minutely schedule, everything down for five slots; back 30 s after the fifth was due.
    now = DUE + timedelta(minutes=4, seconds=30)
    later = DUE + timedelta(minutes=5)
    latest = plan_firing("* * * * *", "UTC", DUE, now, "latest", 10, 10)
    assert (latest.slots, latest.dropped, latest.next_due) == ([DUE + timedelta(minutes=4)], 4, later)
    skip = plan_firing("* * * * *", "UTC", DUE, now, "skip", 10, 10)
    assert (skip.slots, skip.dropped, skip.next_due) == ([], 5, later)
    every = plan_firing("* * * * *", "UTC", DUE, now, "all", 10, 10)
    assert (every.slots, every.dropped) == ([DUE + timedelta(minutes=i) for i in range(5)], 0)
    capped = plan_firing("* * * * *", "UTC", DUE, now, "all", 2, 10)
    assert (capped.slots, capped.dropped) == ([DUE + timedelta(minutes=3), DUE + timedelta(minutes=4)], 3)


def test_latest_fires_no_missed_slot_beside_an_on_time_one() -> None:
    now = DUE + timedelta(minutes=4, seconds=5)
    plan = plan_firing("* * * * *", "UTC", DUE, now, "latest", 10, 10)
    assert (plan.slots, plan.dropped) == ([DUE + timedelta(minutes=4)], 4)


def test_nothing_before_the_due_time() -> None:
    plan = plan_firing("* * * * *", "UTC", DUE, DUE - timedelta(seconds=1), "all", 10, 60)
    assert (plan.slots, plan.next_due) == ([], DUE)


def test_slot_key_names_the_schedule_and_the_slot() -> None:
    assert slot_key("nightly", datetime(2026, 1, 2, 3, 4, 5)) == "schedule:nightly@2026-01-02T03:04:05Z"


def test_cron_in_words() -> None:
    assert describe("0 3 * * *") == "At 03:00 every day"


# ---------------------------------------------------------------------------- declarations
class Report(BaseModel):
    name: str


def make_app() -> ChokaQ:
    app = ChokaQ(storage_url="sqlite:///:memory:")

    @app.job("report_v1", payload=Report, queue="reports")
    def report(r: Report) -> None: ...

    return app


@pytest.mark.parametrize(
    ("cron", "tz", "message"),
    [
        ("61 * * * *", "UTC", "schedule 'nightly': invalid cron expression '61 * * * *': Bad minute"),
        ("* * *", "UTC", "schedule 'nightly': invalid cron expression '* * *': Wrong number of fields"),
        ("0 3 * * *", "Europe/Osloo", "schedule 'nightly': unknown time zone 'Europe/Osloo'"),
        ("0 3 * * *", "", "schedule 'nightly': unknown time zone ''"),
    ],
)
def test_bad_cron_or_zone_refused_at_declaration(cron: str, tz: str, message: str) -> None:
    app = make_app()
    with pytest.raises(ScheduleError, match="^" + message.replace("*", r"\*").replace("(", r"\(")):
        app.schedule("nightly", cron, job="report_v1", payload={"name": "q"}, tz=tz)
    assert app.schedules == {}


def test_unknown_job_type_and_bad_payload_refused_at_start() -> None:
    app = make_app()
    app.schedule("ghost", "0 3 * * *", job="nope_v1")
    with pytest.raises(ScheduleError, match="schedule 'ghost': no handler for job type 'nope_v1'"):
        app.checked_schedules()
    app = make_app()
    app.schedule("bad", "0 3 * * *", job="report_v1", payload={"nom": "q"})
    with pytest.raises(ScheduleError, match="schedule 'bad': payload refused for 'report_v1'"):
        app.checked_schedules()


def test_checked_schedules_resolve_the_handlers_queue_and_payload() -> None:
    app = make_app()
    app.schedule("nightly", " 0  3 * * * ", job="report_v1", payload=Report(name="q3"), tz="Europe/Oslo")
    (spec,) = app.checked_schedules()
    assert (spec.queue, spec.cron, spec.tz, spec.payload_value()) == ("reports", "0 3 * * *", OSLO, {"name": "q3"})


def test_job_decorator_declares_a_schedule_named_after_the_type() -> None:
    app = ChokaQ(storage_url="sqlite:///:memory:")

    @app.job("tidy_v1", schedule="*/5 * * * *", tz="Europe/Oslo")
    def tidy(payload: dict[str, object]) -> None: ...

    assert app.schedules["tidy_v1"] == ScheduleSpec("tidy_v1", "*/5 * * * *", "tidy_v1", "{}", None, tz=OSLO)
    with pytest.raises(ScheduleError, match="already declared"):
        app.schedule("tidy_v1", "* * * * *", job="tidy_v1")


def test_bad_policy_refused() -> None:
    with pytest.raises(ScheduleError, match="missed must be one of latest, skip, all"):
        ScheduleSpec("x", "* * * * *", "t", missed="never")  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="missed_max must be"):
        ScheduleSpec("x", "* * * * *", "t", missed="all", missed_max=0)
