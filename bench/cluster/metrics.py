"""The metrics DB of a run, and the per-epoch figures computed from it.

This checkout's jobs are read through the metrics store (ballast.store.JobStore). The old data
plane (OLD_COMMIT) wrote an older schema the current models do not match (no `dead_letters`
column), so its DB alone is read with plain SQL over the columns both schemas share
(`legacy=True`).
"""

from __future__ import annotations

import math
import sqlite3
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ballast.store import JobStore
from bench.ballast_job import OPERATOR
from bench.cluster.profile import ClusterProfile
from bench.infra import Proc, wait_until


def _store(db_url: str, job: str) -> JobStore:
    return JobStore.bind(db_url, job, OPERATOR)  # every job of this experiment runs the key-count operator


def _ts(v: Any) -> float:
    if v is None:
        return math.nan
    d = datetime.fromisoformat(str(v))
    return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()


def _legacy_rows(db_url: str, sql: str, job: str) -> list[Any]:
    """Rows of the old data plane's SQLite DB; none while the job has not created it (or its tables)."""
    path = db_url.removeprefix("sqlite:///")
    if not db_url.startswith("sqlite:///") or not Path(path).exists():
        return []
    con = sqlite3.connect(path, timeout=30)
    try:
        return con.execute(sql, (job,)).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        con.close()


def read_epochs(db_url: str, job: str, *, legacy: bool = False) -> list[dict[str, Any]]:
    """The job's epochs, oldest first: rows read, batch and migration ms, backlog, W, start and end (s)."""
    if legacy:
        rows = _legacy_rows(db_url, "SELECT epoch, input_rows, batch_ms, migration_ms, backlog, workers, started_at, "
                                    "ended_at FROM epoch_metrics WHERE job = ? ORDER BY epoch", job)
    else:
        rows = [(r.epoch, r.input_rows, r.batch_ms, r.migration_ms, r.backlog, r.workers, r.started_at, r.ended_at)
                for r in _store(db_url, job).epoch_metrics()]
    return [{"epoch": r[0], "input_rows": r[1], "batch_ms": r[2], "migration_ms": r[3], "backlog": r[4],
             "workers": r[5], "started_at": _ts(r[6]), "ended_at": _ts(r[7])} for r in rows]


def read_workers(db_url: str, job: str, *, legacy: bool = False) -> dict[int, list[dict[str, Any]]]:
    """epoch -> its workers' rows (records in, useful and wall ms)."""
    if legacy:
        rows = _legacy_rows(db_url, "SELECT epoch, worker, records_in, useful_ms, wall_ms FROM worker_metrics "
                                    "WHERE job = ?", job)
    else:
        rows = [(w.epoch, w.worker, w.records_in, w.useful_ms, w.wall_ms) for w in _store(db_url, job).worker_metrics()]
    out: dict[int, list[dict[str, Any]]] = {}
    for e, w, rec, useful, wall in rows:
        out.setdefault(e, []).append({"worker": w, "records_in": rec, "useful_ms": useful, "wall_ms": wall})
    return out


def queued_epoch(db_url: str, job: str, plan_id: str) -> int | None:
    """The epoch that received a step and queued it (a pre-copy step: the warming epoch)."""
    return _store(db_url, job).first_step_decision_epoch(plan_id, "queue")


def heartbeat_executors(db_url: str, job: str) -> int | None:
    """Executors the job holds, as its heartbeat says (None before its first heartbeat)."""
    return _store(db_url, job).executors()


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


def epoch_cost(db_url: str, job: str, t0: float, t1: float, snapshots: set[int] | None = None, *,
               legacy: bool = False) -> dict[str, Any]:
    """Per-epoch cost over epochs that started in [t0, t1] and read input: batch_ms and the
    operator's useful time (sum over workers, and the busiest worker); with `snapshots` (the epochs
    that wrote a state snapshot), also the median batch_ms of the other epochs."""
    eps = [e for e in read_epochs(db_url, job, legacy=legacy) if t0 <= e["started_at"] <= t1 and e["input_rows"] > 0]
    wk = read_workers(db_url, job, legacy=legacy)
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


def measured_window(db_url: str, job: str, C: ClusterProfile, proc: Proc, *,
                    legacy: bool = False) -> tuple[float, float]:
    """From now (the load has just started): at least `steady_s`, and until `min_epochs` epochs with
    input have started `skip_s` in. Returns (t0, t1) for epoch_cost(t0 + skip_s, t1)."""
    t0 = time.time()
    time.sleep(C.steady_s)
    wait_until(lambda: len([e for e in read_epochs(db_url, job, legacy=legacy)
                            if e["started_at"] >= t0 + C.skip_s and e["input_rows"] > 0]) >= C.min_epochs,
               C.timeout_s, f"{C.min_epochs} measured epochs of {job}", poll=0.5, proc=proc)
    return t0, time.time()


def wait_rows(db_url: str, job: str, total: int, timeout: float, proc: Proc, what: str, *,
              legacy: bool = False) -> None:
    wait_until(lambda: sum(e["input_rows"] for e in read_epochs(db_url, job, legacy=legacy)) >= total, timeout, what,
               poll=1.0, proc=proc)
