"""Handlers for the subprocess crash and concurrency tests.

Every start is appended to the file named by CHOKAQ_TEST_RECORD (one line per start, O_APPEND),
so a test can prove each job ran exactly once across processes.
"""

from __future__ import annotations

import os
import time

from chokaq import ChokaQ, JobContext
from chokaq.storage import Storage

# The stall test (tests/acceptance/test_stall.py) on SQLite: while the file named here exists, the
# worker's success writes wait before their transaction begins. SQLite has one writer lock, so the
# database itself cannot hold back completions alone (a lock that stalls them stalls claims and
# starts too); on PostgreSQL the test locks JobsArchive instead and this stays unset.
STALL = os.environ.get("CHOKAQ_TEST_STALL_COMPLETIONS", "")


def _hold_completions(op: str) -> None:
    while op == "complete" and os.path.exists(STALL):
        time.sleep(0.01)


class _StalledApp(ChokaQ):
    @property
    def storage(self) -> Storage:
        # The CLI closes the app's storage to point it at --db: hook whichever storage is current.
        storage = super().storage
        storage.fault_injector = _hold_completions
        return storage


app = _StalledApp() if STALL else ChokaQ()


def _record(job_id: str, what: str) -> None:
    path = os.environ.get("CHOKAQ_TEST_RECORD")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{what} {job_id} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


@app.job("record")
def record(payload: dict[str, object], ctx: JobContext) -> None:
    _record(ctx.job_id, "start")


@app.job("slow")
async def slow(payload: dict[str, object], ctx: JobContext) -> None:
    import asyncio

    _record(ctx.job_id, "start")
    deadline = time.monotonic() + float(str(payload.get("seconds", 60)))
    while time.monotonic() < deadline and not ctx.is_cancelled():
        await asyncio.sleep(0.05)


@app.job("sleepy_sync")
def sleepy_sync(payload: dict[str, object], ctx: JobContext) -> None:
    _record(ctx.job_id, "start")
    deadline = time.monotonic() + float(str(payload.get("seconds", 60)))
    while time.monotonic() < deadline and not ctx.is_cancelled():
        time.sleep(0.05)


# Cancelled while running (tests/acceptance/test_cancel_running.py): each records why it stopped.
@app.job("cancel_async")
async def cancel_async(payload: dict[str, object], ctx: JobContext) -> None:
    import asyncio

    _record(ctx.job_id, "start")
    try:
        await asyncio.sleep(600)
    except asyncio.CancelledError:
        _record(ctx.job_id, f"cancelled:{ctx.cancel_reason}")
        raise


@app.job("cancel_thread")
def cancel_thread(payload: dict[str, object], ctx: JobContext) -> None:
    _record(ctx.job_id, "start")
    ctx.cancelled.wait(600)
    _record(ctx.job_id, f"cancelled:{ctx.cancel_reason}")


@app.job("ignore_cancel")
def ignore_cancel(payload: dict[str, object], ctx: JobContext) -> None:
    """Never looks at ctx: runs until the file ``payload["release"]`` exists, then returns."""
    _record(ctx.job_id, "start")
    release = str(payload["release"])
    while not os.path.exists(release):
        time.sleep(0.02)
    _record(ctx.job_id, "finished")


# Circuit breakers (tests/acceptance/test_breakers.py): "flaky" fails while the file named by its
# payload exists; "steady" always succeeds.
@app.job("flaky")
def flaky(payload: dict[str, object], ctx: JobContext) -> None:
    _record(ctx.job_id, "flaky")
    if os.path.exists(str(payload["fail_while"])):
        raise RuntimeError("the dependency is down")


@app.job("steady")
def steady(payload: dict[str, object], ctx: JobContext) -> None:
    _record(ctx.job_id, "steady")


# Job logs (tests/acceptance/test_job_logs_crash.py): says how far it got, then waits to be killed.
@app.job("chatty_then_stuck")
async def chatty_then_stuck(payload: dict[str, object], ctx: JobContext) -> None:
    import asyncio
    import logging

    for i in range(5):
        ctx.log(f"step {i} done", step=i)
    logging.getLogger("crashapp.chatty").warning("about to wait at %s", "postgres://u:hunter2@db/x")
    ctx.progress(5, 10, note="half way")
    _record(ctx.job_id, "start")
    while not ctx.is_cancelled():
        await asyncio.sleep(0.05)


# Steps (tests/acceptance/test_steps_crash.py): each side effect appends "effect:<step>" to the
# record file, so a test counts how often each step's effect happened across processes. Step two
# waits inside its body, and the handler waits between steps one and two, until the file
# payload["release"] exists: the test kills the worker while it waits.
async def _wait_for(path: str, job_id: str, what: str) -> None:
    import asyncio

    _record(job_id, what)
    while not os.path.exists(path):
        await asyncio.sleep(0.02)


@app.job("three_steps")
async def three_steps(payload: dict[str, str], ctx: JobContext) -> None:
    from chokaq import StepOutcomeUnknown

    job, release = ctx.job_id, payload["release"]

    async def effect(name: str) -> str:
        if name == "two":
            await _wait_for(release, job, "inside:two")
        _record(job, f"effect:{name}")
        return f"{name} at attempt {ctx.attempt}"

    await ctx.step("one", effect, "one")
    if payload.get("pause") == "between":
        await _wait_for(release, job, "between:one-two")
    try:
        await ctx.step("two", effect, "two")
    except StepOutcomeUnknown as unknown:
        # Check the outside world: did step two's effect happen before the crash?
        done = any(line.split()[:2] == ["effect:two", job] for line in _lines())
        _record(job, f"resolved:two:{'done' if done else 'again'}")
        if done:
            await unknown.step.mark_done("two, found done after the crash")
        else:
            unknown.step.run_again()
        await ctx.step("two", effect, "two")
    await ctx.step("three", effect, "three")


def _lines() -> list[str]:
    path = os.environ.get("CHOKAQ_TEST_RECORD", "")
    return open(path).read().splitlines() if path and os.path.exists(path) else []


# The mixed run (tests/acceptance/test_figures_mixed.py): one always fails (retries, then the DLQ),
# one fails its first attempt only (a retry, then a success).
@app.job("always_fails")
def always_fails(payload: dict[str, object], ctx: JobContext) -> None:
    _record(ctx.job_id, "start")
    raise RuntimeError("upstream 421 refused")


@app.job("fails_once")
def fails_once(payload: dict[str, object], ctx: JobContext) -> None:
    _record(ctx.job_id, "start")
    if ctx.attempt == 1:
        raise RuntimeError("first try fails")
