"""ballast_supervise__<job>: keep a configured Ballast job running — launch + supervise, never babysit.

One DAG per job of dags/ballast_jobs.yaml (tags `ballast`, `job:<job>`), max_active_runs=1.
Each run is a short health check: a fresh heartbeat in the metrics DB means healthy; a
job launched moments ago gets its start-up grace; a missing or stale heartbeat gets the job
(re)launched detached (`python -m spark_jobs.cli run ...`, or spark-submit through the
`spark_default` connection when the job's launcher is spark-submit). No task lives as long as the
stream (docs/operations.md, "Traps": long tasks die of token expiry and heartbeat failures). To stop a job for good,
pause its DAG or remove the job from dags/ballast_jobs.yaml, then stop its driver.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from ballast import dag_ids
from ballast.config import JobConfig, load_jobs, schedules


def dag_id(job: str) -> str:
    return dag_ids.supervise(job)


def make_dag(cfg: JobConfig, schedule: str | None) -> DAG:
    """The supervise DAG of one job: one short health-check task."""
    with DAG(
        dag_id=dag_id(cfg.job),
        description=f"Launch Ballast job {cfg.job} and relaunch it when its heartbeat is stale",
        schedule=schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(minutes=10),
        default_args={"retries": 0},
        tags=["ballast", "supervise", f"job:{cfg.job}"],
        doc_md=__doc__,
    ) as dag:

        @task(task_id="supervise")
        def supervise(job: str = cfg.job) -> dict:
            from ballast import supervisor
            from ballast.config import get_job
            from ballast.hooks import BallastKafkaHook, BallastMetricsDbHook

            kafka = BallastKafkaHook()
            # the job runs as its own principal (conn ballast_kafka_job; absent: BALLAST_KAFKA_CONFIG)
            job_security = BallastKafkaHook("ballast_kafka_job").security()
            h = supervisor.supervise(get_job(job), kafka.bootstrap(), BallastMetricsDbHook().url(), job_security)
            print(f"{job}: {h.status} — {h.message}")
            return {"status": h.status, "message": h.message, "pid": h.pid}

        supervise()
    return dag


def make_dags(jobs: dict[str, JobConfig], schedule: str | None) -> dict[str, DAG]:
    """One supervise DAG per configured job, by dag_id."""
    return {dag_id(job): make_dag(cfg, schedule) for job, cfg in jobs.items()}


globals().update(make_dags(load_jobs(), schedules()["supervise"]))
