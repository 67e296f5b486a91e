"""The metrics DB of a run read with plain SQL, and the per-epoch figures computed from it.

The old data plane (OLD_COMMIT) has its own, older schema, so both DBs are read with the
columns they share, not through the current package's models.
"""

from __future__ import annotations

import math
import sqlite3
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cluster.profile import ClusterProfile
from bench.infra import Proc, wait_until


def _sqlite_path(db_url: str) -> str:
    assert db_url.startswith("sqlite:///"), db_url
    return db_url[len("sqlite:///"):]


def _ts(v: Any) -> float:
    if v is None:
        return math.nan
    d = datetime.fromisoformat(str(v))
    return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()


def read_epochs(db_url: str, job: str) -> list[dict[str, Any]]:
    if not Path(_sqlite_path(db_url)).exists():
        return []  # the job has not created its DB yet
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        rows = con.execute("SELECT epoch, input_rows, batch_ms, migration_ms, backlog, workers, started_at, ended_at "
                           "FROM epoch_metrics WHERE job = ? ORDER BY epoch", (job,)).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []  # nor its schema
        raise
    finally:
        con.close()
    return [{"epoch": r[0], "input_rows": r[1], "batch_ms": r[2], "migration_ms": r[3], "backlog": r[4],
             "workers": r[5], "started_at": _ts(r[6]), "ended_at": _ts(r[7])} for r in rows]


def read_workers(db_url: str, job: str) -> dict[int, list[dict[str, Any]]]:
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        rows = con.execute("SELECT epoch, worker, records_in, useful_ms, wall_ms FROM worker_metrics WHERE job = ?",
                           (job,)).fetchall()
    finally:
        con.close()
    out: dict[int, list[dict[str, Any]]] = {}
    for e, w, rec, useful, wall in rows:
        out.setdefault(e, []).append({"worker": w, "records_in": rec, "useful_ms": useful, "wall_ms": wall})
    return out


def queued_epoch(db_url: str, job: str, plan_id: str) -> int | None:
    """The epoch that received a step and queued it (a pre-copy step: the warming epoch)."""
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        r = con.execute("SELECT min(epoch) FROM step_decisions WHERE job = ? AND plan_id = ? AND action = 'queue'",
                        (job, plan_id)).fetchone()
    finally:
        con.close()
    return r[0] if r else None


def heartbeat_executors(db_url: str, job: str) -> int | None:
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        r = con.execute("SELECT executors FROM heartbeats WHERE job = ?", (job,)).fetchone()
    except sqlite3.Error:
        return None
    finally:
        con.close()
    return r[0] if r else None


def median(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else math.nan


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(x for x in xs if x == x)
    if not xs:
        return math.nan
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


def safe_ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else math.nan


def epoch_cost(db_url: str, job: str, t0: float, t1: float, snapshots: set[int] | None = None) -> dict[str, Any]:
    """Per-epoch cost over epochs that started in [t0, t1] and read input: batch_ms and the
    operator's useful time (sum over workers, and the busiest worker); with `snapshots` (the epochs
    that wrote a state snapshot), also the median batch_ms of the other epochs."""
    eps = [e for e in read_epochs(db_url, job) if t0 <= e["started_at"] <= t1 and e["input_rows"] > 0]
    wk = read_workers(db_url, job)
    rows = []
    for e in eps:
        ws = wk.get(e["epoch"], [])
        rows.append({**e, "useful_ms_sum": sum(w["useful_ms"] for w in ws),
                     "useful_ms_max": max((w["useful_ms"] for w in ws), default=math.nan),
                     "records_in": sum(w["records_in"] for w in ws),
                     "snapshot": None if snapshots is None else e["epoch"] in snapshots})
    b = [r["batch_ms"] for r in rows]
    plain = [r["batch_ms"] for r in rows if not r["snapshot"]]
    return {"epochs": len(rows), "rows": rows, "batch_ms_median": median(b),
            "batch_ms_mean": statistics.fmean(b) if b else math.nan, "batch_ms_p90": _pct(b, 90),
            "batch_ms_max": max(b, default=math.nan),
            "useful_ms_median": median([r["useful_ms_sum"] for r in rows]),
            "useful_ms_max_worker_median": median([r["useful_ms_max"] for r in rows]),
            "input_rows_median": median([r["input_rows"] for r in rows]),
            # per row: the two runs' epochs may differ in size (a busier machine makes longer epochs read more)
            "batch_ms_per_1k_rows": 1000 * sum(b) / max(1, sum(r["input_rows"] for r in rows)) if rows else math.nan,
            "useful_us_per_row": (1000 * sum(r["useful_ms_sum"] for r in rows)
                                  / max(1, sum(r["records_in"] for r in rows))) if rows else math.nan,
            "snapshot_epochs": None if snapshots is None else sum(1 for r in rows if r["snapshot"]),
            "batch_ms_median_no_snapshot": median(plain) if snapshots is not None else math.nan}


def measured_window(db_url: str, job: str, C: ClusterProfile, proc: Proc) -> tuple[float, float]:
    """From now (the load has just started): at least `steady_s`, and until `min_epochs` epochs with
    input have started `skip_s` in. Returns (t0, t1) for epoch_cost(t0 + skip_s, t1)."""
    t0 = time.time()
    time.sleep(C.steady_s)
    wait_until(lambda: len([e for e in read_epochs(db_url, job)
                            if e["started_at"] >= t0 + C.skip_s and e["input_rows"] > 0]) >= C.min_epochs,
               C.timeout_s, f"{C.min_epochs} measured epochs of {job}", poll=0.5, proc=proc)
    return t0, time.time()


def wait_rows(db_url: str, job: str, total: int, timeout: float, proc: Proc, what: str) -> None:
    wait_until(lambda: sum(e["input_rows"] for e in read_epochs(db_url, job)) >= total, timeout, what, poll=1.0,
               proc=proc)
