"""ballast_supervise: keep every configured Ballast job running — launch + supervise, never babysit.

Each run is a short health check per job: a fresh heartbeat in the metrics DB means healthy; a
job launched moments ago gets its start-up grace; a missing or stale heartbeat gets the job
(re)launched detached (`python -m spark_jobs.cli run ...`, or spark-submit through the
`spark_default` connection when the job's launcher is spark-submit). No task lives as long as the
stream (docs/operations.md, "Traps": long tasks die of token expiry and heartbeat failures). To stop a job for good,
pause this DAG or remove the job from dags/ballast_jobs.yaml, then stop its driver.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from ballast.config import JobConfig, load_jobs, schedules


def make_dag(jobs: dict[str, JobConfig], schedule: str | None) -> DAG:
    with DAG(
        dag_id="ballast_supervise",
        description="Launch Ballast jobs and relaunch any whose heartbeat is stale",
        schedule=schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(minutes=10),
        default_args={"retries": 0},
        tags=["ballast"],
        doc_md=__doc__,
    ) as dag:
        for cfg in jobs.values():

            @task(task_id=f"supervise_{cfg.job}")
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


dag = make_dag(load_jobs(), schedules()["supervise"])
