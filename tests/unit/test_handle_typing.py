"""mypy checks a handle's payload: a snippet that passes the wrong model (or a dict) must be
rejected, one that passes the right model accepted (mypy run on both, as a user's CI would)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RIGHT = """
from datetime import datetime, timezone
from pydantic import BaseModel
from chokaq import ChokaQ, Enqueued, JobContext

class Email(BaseModel):
    to: str

app = ChokaQ()

@app.job("email_v1", payload=Email)
async def send(email: Email, ctx: JobContext) -> None: ...

@app.job("untyped")
def anything(payload: dict[str, int]) -> int:
    return len(payload)

async def produce() -> None:
    job_id: str = send.enqueue(Email(to="a"), at=datetime(2026, 12, 24, 8, tzinfo=timezone.utc))
    other: str = await send.enqueue_async(Email(to="b"), priority=5, idempotency_key="k")
    many: list[Enqueued] = send.enqueue_many([Email(to="c"), Email(to="d")])
    more: list[Enqueued] = await app.enqueue_many_async([send.prepare(Email(to="e"), idempotency_key="k2")])
    anything.enqueue({"free": 1})
    n: int = anything({"a": 1})
    print(job_id, other, many, more, n)
"""

WRONG = """
from pydantic import BaseModel
from chokaq import ChokaQ

class Email(BaseModel):
    to: str

class Invoice(BaseModel):
    number: int

app = ChokaQ()

@app.job("email_v1", payload=Email)
def send(email: Email) -> None: ...

send.enqueue(Invoice(number=1))
send.enqueue({"to": "a"})
send.enqueue_many([Invoice(number=2)])
send(Invoice(number=3))
"""


def test_mypy_rejects_a_wrong_payload_and_accepts_the_right_one(tmp_path: Path) -> None:
    (tmp_path / "right.py").write_text(RIGHT)
    (tmp_path / "wrong.py").write_text(WRONG)
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--follow-imports",
            "silent",
            "right.py",
            "wrong.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = run.stdout.splitlines()
    assert not [line for line in lines if line.startswith("right.py")], run.stdout
    wrong = [line for line in lines if line.startswith("wrong.py")]
    # Each of the four calls at the end of wrong.py is an error of its own.
    calls = [n for n, line in enumerate(WRONG.splitlines(), 1) if line.startswith("send")]
    assert len(calls) == 4
    assert sorted({int(line.split(":")[1]) for line in wrong}) == calls, run.stdout
    assert all("Invoice" in line or "dict" in line for line in wrong if ": error:" in line), run.stdout
