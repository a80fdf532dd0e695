"""docs/steps.md's worked example (charge, email, receipt), run as written: the block marked
``# example: checkout`` is executed, and its handler meets a failed attempt and a crash."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from chokaq.domain.models import Lease
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import Actor, AdminStore
from chokaq.storage.steps import load_steps, start_step
from tests.helpers import wait_for
from tests.integration.test_worker import make_app

DOC = Path(__file__).resolve().parents[2] / "docs" / "steps.md"


def example() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(# example: checkout\n.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/steps.md has one block marked '# example: checkout'"
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)
    return namespace


class Payments:
    def __init__(self) -> None:
        self.charges: dict[str, str] = {}
        self.calls = 0

    def charge(self, order_id: str, amount: int) -> str:
        self.calls += 1
        self.charges[order_id] = f"ch_{order_id}_{amount}"
        return self.charges[order_id]

    def find(self, order_id: str) -> str | None:
        return self.charges.get(order_id)


class Mailer:
    def __init__(self, fail_first: bool) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fail_first = fail_first

    async def send(self, to: str, text: str) -> str:
        if self.fail_first:
            self.fail_first = False
            raise TimeoutError("the mail server timed out")
        self.sent.append((to, text))
        return f"msg-{len(self.sent)}"


class Receipts:
    def __init__(self) -> None:
        self.stored: list[tuple[str, str]] = []

    def store(self, order_id: str, charge_id: str) -> dict[str, str]:
        self.stored.append((order_id, charge_id))
        return {"receipt": f"r-{order_id}"}


ORDER = {"id": "42", "amount": 1999, "email": "buyer@example.com"}


def test_a_failed_email_retries_without_charging_twice(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, retry={"max_attempts": 3})
    payments, mailer, receipts = Payments(), Mailer(fail_first=True), Receipts()
    example()["register"](app, payments, mailer, receipts)
    job_id = app.enqueue("checkout_v1", ORDER)
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    assert payments.calls == 1
    assert mailer.sent == [("buyer@example.com", "Paid: ch_42_1999")]
    assert receipts.stored == [("42", "ch_42_1999")]
    journal = [(s.name, s.state, s.attempt, s.value()) for s in load_steps(app.storage, job_id)]
    assert journal == [
        ("charge", "done", 1, "ch_42_1999"),
        ("email", "done", 2, "msg-1"),
        ("receipt", "done", 2, {"receipt": "r-42"}),
    ]


def test_a_crash_inside_the_charge_is_resolved_by_asking_the_provider(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    payments, mailer, receipts = Payments(), Mailer(fail_first=False), Receipts()
    example()["register"](app, payments, mailer, receipts)
    # A run that started the charge, charged, and died before recording it (as a SIGKILL leaves it:
    # tests/acceptance/test_steps_crash.py kills real workers); the sweep buried it as a zombie.
    s = app.storage
    job_id = app.enqueue("checkout_v1", ORDER)
    (rec,) = s.start("dead-worker", s.fetch("dead-worker", 1)).started
    assert start_step(s, Lease(job_id, "dead-worker", rec.attempt_count), "charge", again=False)
    payments.charge("42", 1999)
    assert s.fail(rec.lease, FailureReason.ZOMBIE, "Zombie detected: heartbeat expired")
    AdminStore(s).resurrect(job_id, Actor("ops@example.com", "operator"))  # resume: the default
    run_worker(app)
    wait_for(lambda: (r := s.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    assert payments.calls == 1 and len(mailer.sent) == 1 and len(receipts.stored) == 1
    charge = load_steps(s, job_id)[0]
    assert (charge.name, charge.state, charge.value()) == ("charge", "done", "ch_42_1999")
