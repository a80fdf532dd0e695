"""compare.py's report: the side-by-side table, per-round figures, paired ratios and the targets.

Medians hide which rounds ran in a slow phase of the machine; paired ratios do not: chokaq's round i
and a peer's round i ran back to back, under about the same foreign load, so their ratio is steadier
than the ratio of two medians. Both are printed; the targets are judged on the paired medians.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterable
from typing import Any

from benchmarks.compare_systems import ChokaqSystem, PeerSystem, Round, System

# Issue 17's targets (PostgreSQL, both modes): chokaq C=40 >= 1.5x pgqueuer and oban-py (paired
# median), client CPU per job <= 1.2x pgqueuer's, enqueue -> start p50 <= 5 ms; procrastinate as before.
TARGET_RATIO = {"pgqueuer": 1.5, "oban-py": 1.5, "procrastinate": 3.0}
TARGET_CPU_VS_PGQ = 1.2
TARGET_P50_MS = 5.0
METRICS = (
    ("jobs/s", "jobs_per_s"),
    ("client CPU/job", "cpu_us_per_job"),
    ("server CPU/job", "server_cpu_us_per_job"),
    ("srv db", "server_db_cpu_us_per_job"),
)


def med(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def ok_rounds(rounds: list[Round], key: str, mode: str) -> list[Round]:
    return [r for r in rounds if r.system == key and r.mode == mode and r.error is None]


def paired(rounds: list[Round], a: str, b: str, mode: str, attr: str) -> list[float]:
    """a / b per round index, for the rounds both completed."""
    av = {r.round: getattr(r, attr) for r in ok_rounds(rounds, a, mode)}
    bv = {r.round: getattr(r, attr) for r in ok_rounds(rounds, b, mode)}
    return [av[i] / bv[i] for i in sorted(av) if i in bv and bv[i] and not math.isnan(av[i] / bv[i])]


def pair_key(peer: PeerSystem) -> str:
    return ChokaqSystem("postgres", peer.pair_c).key


def fmt(v: Any, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


# --------------------------------------------------------------------------- rows


def _measured(row: dict[str, Any], rs: list[Round]) -> None:
    for attr in (
        "jobs_per_s",
        "cpu_us_per_job",
        "server_cpu_us_per_job",
        "server_db_cpu_us_per_job",
        "calib_ms",
        "loadavg",
    ):
        row[attr] = med(getattr(r, attr) for r in rs)
    row["per_round"] = [r.jobs_per_s for r in rs]


def _chokaq_counts(row: dict[str, Any], system: ChokaqSystem, mode: str) -> None:
    pj = system.counts.get(mode)
    if pj:
        row.update(
            stmts_per_job=pj["stmts_per_job"],
            rt_per_job=pj["round_trips_per_job"],
            server_tx_per_job=pj["server_tx_per_job"],
            breakdown=pj["breakdown"],
        )


def _peer_counts(row: dict[str, Any], system: PeerSystem, mode: str, rounds: list[Round]) -> None:
    srv = system.srv_tx_per_job.get(mode)
    row["server_tx_per_job"] = srv
    row["rt_per_job"] = srv * system.rt_per_tx if srv and system.rt_per_tx else None
    ratios = paired(rounds, pair_key(system), system.key, mode, "jobs_per_s")
    row["ratio"] = f"{med(ratios):.2f}x (C={system.pair_c})" if ratios else None


def throughput_rows(systems: list[System], rounds: list[Round], modes: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for mode in modes:
        for system in systems:
            c = system.c if isinstance(system, ChokaqSystem) else system.effective_c
            row: dict[str, Any] = {"kind": "throughput", "mode": mode, "key": system.key, "c": c}
            row.update(system=system.label, backend=system.backend_label)
            rs = ok_rounds(rounds, system.key, mode)
            failed = [r.error for r in rounds if r.system == system.key and r.mode == mode and r.error]
            row["note"] = system.skip or (f"{len(failed)} round(s) failed: {failed[0]}" if failed else None)
            if rs:
                _measured(row, rs)
            if isinstance(system, ChokaqSystem):
                _chokaq_counts(row, system, mode)
            else:
                _peer_counts(row, system, mode, rounds)
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- printing

COLUMNS = [
    ("system", "system", None),
    ("backend", "backend", None),
    ("mode", "mode", None),
    ("C", "c", None),
    ("jobs/s", "jobs_per_s", 0),
    ("chokaq/peer", "ratio", None),
    ("p50 ms", "p50_ms", 2),
    ("p99 ms", "p99_ms", 2),
    ("cpu us/job", "cpu_us_per_job", 0),
    ("srv cpu us/job", "server_cpu_us_per_job", 0),
    ("srv db", "server_db_cpu_us_per_job", 0),
    ("stmts/job", "stmts_per_job", 3),
    ("rt/job", "rt_per_job", 3),
    ("srv tx/job", "server_tx_per_job", 3),
    ("calib ms", "calib_ms", 0),
    ("load1", "loadavg", 2),
]


def table(rows: list[dict[str, Any]]) -> None:
    cells = [[fmt(r.get(key), d) if d is not None else fmt(r.get(key)) for _, key, d in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(COLUMNS)]
    print("  ".join(h.ljust(w) for (h, _, _), w in zip(COLUMNS, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r, c in zip(rows, cells, strict=True):
        print("  ".join(x.ljust(w) if i < 3 else x.rjust(w) for i, (x, w) in enumerate(zip(c, widths, strict=True))))
        if r.get("note"):
            print(f"    {r['note']}")
    sys.stdout.flush()


def per_round_lines(systems: list[System], rounds: list[Round], modes: list[str]) -> list[str]:
    lines = ["Per round (jobs/s, client / server CPU us per job, calibration wall/CPU ms just before the round):"]
    for mode in modes:
        for system in systems:
            rs = [r for r in rounds if r.system == system.key and r.mode == mode]
            if not rs:
                continue
            parts = [
                f"r{r.round} FAILED (calib {r.calib_ms:.0f})"
                if r.error
                else f"r{r.round} {r.jobs_per_s:,.0f}/s {fmt(r.cpu_us_per_job)}/{fmt(r.server_cpu_us_per_job)} us "
                f"calib {r.calib_ms:.0f}/{r.calib_cpu_ms:.0f}"
                for r in rs
            ]
            lines.append(f"  {mode:<7} {system.key:<22} " + "; ".join(parts))
    return lines


def paired_lines(systems: list[System], rounds: list[Round], modes: list[str]) -> list[str]:
    lines = ["Paired ratios, chokaq / peer in the same round index (per round ... | median of them):"]
    for mode in modes:
        for peer in (p for p in systems if isinstance(p, PeerSystem) and not p.skip):
            if not paired(rounds, pair_key(peer), peer.key, mode, "jobs_per_s"):
                continue  # its chokaq pair did not run (--concurrency) or every round failed
            cells = []
            for label, attr in METRICS:
                ratios = paired(rounds, pair_key(peer), peer.key, mode, attr)
                per = " ".join(f"{x:.2f}" for x in ratios) or "-"
                cells.append(f"{label} {per} | {fmt(med(ratios), 2)}")
            lines.append(f"  {mode:<7} chokaq C={peer.pair_c} / {peer.key:<13} " + "; ".join(cells))
    return lines


def _ratio_verdicts(peer: PeerSystem, rounds: list[Round], mode: str) -> list[str]:
    out = []
    x = med(paired(rounds, pair_key(peer), peer.key, mode, "jobs_per_s"))
    target = TARGET_RATIO.get(peer.key)
    if target is not None and not math.isnan(x):
        verdict = "MET" if x >= target else f"MISSED by {target / x:.2f}x"
        out.append(f"  {mode:<7} chokaq C={peer.pair_c} / {peer.key} = {x:.2f}x (>= {target}x): {verdict}")
    y = med(paired(rounds, pair_key(peer), peer.key, mode, "cpu_us_per_job"))
    if peer.key == "pgqueuer" and not math.isnan(y):
        verdict = "MET" if y <= TARGET_CPU_VS_PGQ else "MISSED"
        out.append(
            f"  {mode:<7} chokaq C=40 client CPU/job / pgqueuer's = {y:.2f}x (<= {TARGET_CPU_VS_PGQ}x): {verdict}"
        )
    return out


def verdicts(systems: list[System], rounds: list[Round], modes: list[str], latency: list[dict[str, Any]]) -> list[str]:
    out = ["Targets (PostgreSQL, paired medians):"]
    for mode in modes:
        for peer in (p for p in systems if isinstance(p, PeerSystem) and not p.skip):
            out += _ratio_verdicts(peer, rounds, mode)
    for r in latency:
        if r["system"].startswith("chokaq ") and r["backend"].startswith("postgres"):
            p50 = r["p50_ms"]
            out.append(
                f"  chokaq enqueue->start p50, {r['backend'].split('(')[-1].rstrip(')')} = {p50:.2f} ms "
                f"(<= {TARGET_P50_MS:g} ms): " + ("MET" if p50 <= TARGET_P50_MS else "MISSED")
            )
    return out if len(out) > 1 else [*out, "  (not enough systems run to judge)"]
