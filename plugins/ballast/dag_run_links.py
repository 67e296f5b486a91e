"""The console's links into Airflow: each job's DAGs, and for a plan or a decision the DAG run that
was running when it was made (ballast_migrate for a manual plan, the job's rebalance DAG otherwise).

Apart from plugin.py (the app, its routes and its page) because this is the one part of the console
that reads Airflow's own metadata DB; a link is a convenience, so an unreadable DB gives none.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from ballast import dag_ids
from ballast.hooks import airflow_base

log = logging.getLogger(__name__)


def _dag_runs(since: datetime) -> list[Any]:
    """Ballast's DAG runs that were alive at or after `since`, newest first (Airflow's metadata DB)."""
    try:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import or_, select

        with create_session() as session:
            return list(session.execute(
                select(DagRun.dag_id, DagRun.run_id, DagRun.start_date, DagRun.end_date, DagRun.conf)
                .where(DagRun.dag_id.like("ballast%"), or_(DagRun.end_date.is_(None), DagRun.end_date >= since))
                .order_by(DagRun.start_date.desc()).limit(5000)
            ).all())
    except Exception:  # links are a convenience: the console works without them
        log.debug("could not read DAG runs", exc_info=True)
        return []


def run_link(runs: list[Any], at: str | None, prefix: str, job: str) -> dict[str, str] | None:
    """The run of DAG `prefix`, or of a per-job DAG `prefix…<job>…`, that was running at `at` (the
    per-job one wins); a dry run stores no plan, so it is never the run behind one."""
    if not at:
        return None
    t = datetime.fromisoformat(at)
    slack = timedelta(seconds=5)
    found = []
    for r in runs:
        if not r.dag_id.startswith(prefix) or (r.dag_id != prefix and job not in r.dag_id) or r.start_date is None:
            continue
        conf = r.conf if isinstance(r.conf, dict) else {}
        if conf.get("job") not in (None, job) or conf.get("dry_run") is True:
            continue
        end = r.end_date or datetime.now(UTC)
        if r.start_date - slack <= t <= end + slack:
            found.append(r)
    if not found:
        return None
    best = max(found, key=lambda r: (job in r.dag_id, r.start_date))
    return {"dag_id": best.dag_id, "run_id": best.run_id,
            "url": f"{airflow_base()}/dags/{quote(best.dag_id, safe='')}/runs/{quote(best.run_id, safe='')}"}


def with_run_links(rows: list[dict[str, Any]], job: str, time_key: str) -> list[dict[str, Any]]:
    """Each row's `run`: the DAG run that was running at its `time_key` (ballast_migrate for a manual
    plan, the job's rebalance DAG otherwise), None when there is none."""
    if not rows:
        return rows
    since = min(datetime.fromisoformat(r[time_key]) for r in rows if r.get(time_key)) - timedelta(minutes=5)
    runs = _dag_runs(since)
    for r in rows:
        manual = r.get("source") == "manual"
        r["run"] = run_link(runs, r.get(time_key), dag_ids.MIGRATE if manual else "ballast_rebalance", job)
    return rows


def with_dag_links(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each job's DAG runs in Airflow's UI: its rebalance and supervise DAGs (dags/ naming)."""
    base = airflow_base()
    for r in rows:
        ids = {"rebalance": dag_ids.rebalance(r["job"]), "supervise": dag_ids.supervise(r["job"])}
        r["dags"] = [{"name": kind, "url": f"{base}/dags/{quote(d, safe='')}/runs"} for kind, d in ids.items()]
    return rows
