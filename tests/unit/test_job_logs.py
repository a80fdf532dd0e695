"""A running job's log buffer: bounds (lines, characters, one huge line), what is written when, the
progress a handler may report, the logging capture's context, and the heartbeat's one statement."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import math
from collections.abc import Collection, Mapping, Sequence

import pytest
from sqlalchemy.exc import OperationalError

from chokaq.domain.job_logs import JobNotes, LogLimits, Notes, encode_line, parse_logs, parse_progress
from chokaq.domain.models import Lease
from chokaq.runtime.handlers import JobContext
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.job_log_capture import CURRENT_JOB, install
from chokaq.runtime.outage import Outage
from chokaq.settings import ExecutionSettings
from tests.unit.test_heartbeat import _run, _Runs


def _logs(notes: JobNotes) -> dict[str, object]:
    logs, _, _ = notes.unwritten()
    parsed = parse_logs(logs)
    assert parsed is not None
    return parsed


def test_the_oldest_lines_go_past_the_line_bound_and_are_counted() -> None:
    notes = JobNotes(LogLimits(max_lines=10), 3, "w")
    for i in range(25):
        notes.add(encode_line("INFO", f"line {i}", None))
    logs = _logs(notes)
    assert logs["attempt"] == 3 and logs["worker"] == "w" and logs["dropped"] == 15
    assert [line["message"] for line in logs["lines"]] == [f"line {i}" for i in range(15, 25)]  # type: ignore[attr-defined]


def test_the_stored_value_stays_under_the_character_bound_however_the_lines_escape() -> None:
    limits = LogLimits(max_lines=100_000, max_chars=8_000)
    notes = JobNotes(limits, 1, "w")
    for i in range(500):
        notes.add(encode_line("INFO", f"{i} " + "ж😀\x01" * 60, {"k": "v" * 150}))  # escaped up to 12x
        stored, _, _ = notes.unwritten()
        assert stored is not None and len(stored) <= limits.max_chars and stored.isascii()
    logs = _logs(notes)
    assert logs["dropped"] and str(logs["lines"][-1]["message"]).startswith("499 ")  # type: ignore[index]


def test_a_line_that_escapes_too_long_is_cut_and_one_past_a_quarter_of_the_bound_replaced() -> None:
    huge = encode_line("INFO", "😀" * 2_000, {f"f{i}": "😀" * 200 for i in range(20)})  # 72,000 escaped
    assert len(huge) <= 12_000 and "line cut" in huge and '"f"' not in huge
    notes = JobNotes(LogLimits(max_chars=8_000), 1, "w")
    notes.add(encode_line("INFO", "kept", None))
    notes.add(huge)
    notes.add(encode_line("INFO", "after", None))
    lines = _logs(notes)["lines"]
    assert [line["message"] for line in lines][::2] == ["kept", "after"]  # type: ignore[attr-defined]
    assert "a log line of" in str(lines[1]["message"]) and lines[1]["level"] == "WARNING"  # type: ignore[index]


def test_a_value_is_unwritten_until_written_and_lines_added_meanwhile_stay_unwritten() -> None:
    notes = JobNotes(LogLimits(), 1, "w")
    assert notes.unwritten()[:2] == (None, None)
    notes.add(encode_line("INFO", "a", None))
    logs, progress, mark = notes.unwritten()
    assert logs is not None and progress is None
    notes.add(encode_line("INFO", "b", None))  # while the heartbeat's write is out
    notes.written(mark)
    again, _, mark2 = notes.unwritten()
    assert again is not None and '"b"' in again
    notes.written(mark2)
    notes.written(mark)  # a late acknowledgement never takes the mark back
    assert notes.unwritten()[:2] == (None, None)
    notes.set_progress(2, 5, "n")
    assert notes.unwritten()[:2] == (None, notes.unwritten()[1]) and parse_progress(notes.unwritten()[1]) is not None


@pytest.mark.parametrize(
    ("done", "total", "error"),
    [("3", None, TypeError), (True, None, TypeError), (1, "10", TypeError), (-1, None, ValueError),
     (math.nan, None, ValueError), (1, math.inf, ValueError)],
)  # fmt: skip
def test_progress_refuses_what_is_not_a_finite_number(done: object, total: object, error: type[Exception]) -> None:
    ctx = JobContext("j", 1, "q", "t", "w")
    with pytest.raises(error, match="progress"):
        ctx.progress(done, total)  # type: ignore[arg-type]


def test_progress_as_stored_and_read_back() -> None:
    ctx = JobContext("j", 1, "q", "t", "w")
    ctx.progress(3, 4.5, note="x" * 1000)
    _, progress, _ = ctx.notes().unwritten()
    read = parse_progress(progress)
    assert read is not None and read["done"] == 3 and read["total"] == 4.5 and len(read["note"]) < 300
    # However the note escapes, the stored value fits the Progress column (4,000).
    ctx.progress(1e300, 1.7976931348623157e308, note="😀\udc80\x01" * 5_000)
    _, progress, _ = ctx.notes().unwritten()
    assert progress is not None and len(progress) <= 3_900 and progress.isascii()


def test_a_handler_that_logs_nothing_has_no_buffer() -> None:
    ctx = JobContext("j", 1, "q", "t", "w")
    install()
    token = CURRENT_JOB.set(ctx)
    try:
        logging.getLogger("tests.unit.joblogs").debug("below the level")  # DEBUG < INFO: not kept
    finally:
        CURRENT_JOB.reset(token)
    assert ctx._notes is None


def test_records_are_kept_only_inside_the_jobs_context_and_at_its_level() -> None:
    install()
    log = logging.getLogger("tests.unit.joblogs")
    log.setLevel(logging.DEBUG)
    ctx = JobContext("j", 1, "q", "t", "w", _log_limits=LogLimits(level=logging.WARNING))
    log.warning("outside any job")  # the worker's own: not kept
    token = CURRENT_JOB.set(ctx)
    try:
        log.info("below WARNING")
        log.warning("kept %d", 1)
        # A thread run with the job's context (as execution.py runs plain handlers) keeps its records too.
        contextvars.copy_context().run(log.error, "from the thread's context")
    finally:
        CURRENT_JOB.reset(token)
    log.error("after the handler")
    assert [line["message"] for line in _logs(ctx.notes())["lines"]] == ["kept 1", "from the thread's context"]  # type: ignore[attr-defined]


def test_the_heartbeat_carries_new_lines_in_its_one_call_and_marks_them_written_once_it_succeeds() -> None:
    talker, silent = _run("talker"), _run("silent")
    talker.ctx.log("hello")
    calls: list[tuple[list[str], Mapping[str, Notes] | None]] = []
    fail = [True]

    class Store:
        async def heartbeat(self, leases: Sequence[Lease], notes: Mapping[str, Notes] | None = None) -> Collection[str]:
            calls.append((sorted(lease.job_id for lease in leases), notes))
            if fail[0]:
                raise OperationalError("heartbeat", {}, ConnectionRefusedError("refused"))
            return {"talker", "silent"}

        async def cancelled_runs(self, leases: Sequence[Lease]) -> Collection[str]:
            return set()

    beat = Heartbeat(ExecutionSettings(), Outage(60.0), store=Store(), runs=_Runs(talker, silent))
    asyncio.run(beat.beat())  # refused: the lines stay unwritten
    fail[0] = False
    asyncio.run(beat.beat())
    asyncio.run(beat.beat())  # nothing new: the plain call
    assert [leases for leases, _ in calls] == [["silent", "talker"]] * 3
    first, second, third = (notes for _, notes in calls)
    assert first is not None and second is not None and list(first) == list(second) == ["talker"]
    assert json.loads(second["talker"].logs or "")["lines"][0]["m"] == "hello" and second["talker"].progress is None
    assert third is None


def test_capturing_leaves_an_unconfigured_process_its_warnings_and_basic_config() -> None:
    # A library user who never configured logging still sees chokaq's warnings (Python's last-resort
    # handler prints them while the root has no handler), and a later logging.basicConfig() still
    # works (it does nothing once the root has a handler). A root handler for the capture broke both.
    import subprocess
    import sys

    script = (
        "import logging\n"
        "from chokaq.runtime.job_log_capture import install\n"
        "install()\n"
        "logging.getLogger('chokaq.worker').warning('unconfigured warning')\n"
        "logging.basicConfig(level=logging.INFO, format='configured %(message)s')\n"
        "logging.getLogger('chokaq.worker').info('after basicConfig')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "unconfigured warning" in out.stderr
    assert "configured after basicConfig" in out.stderr
