"""ballast_rebalance__<job>: scheduled DS2 → placement → plan → emit → await (deferrable) → verify.

Runs on its cron schedule OR at once when the job signals (an asset watching `<job>.signals`:
the backlog grew, or the epochs stayed outside the utilization band, for `signal_epochs` epochs;
ballast.policy.signals). The guards still rule either way; the schedule is the safety net.

One DAG per job of dags/ballast_jobs.yaml (tags `ballast`, `job:<job>`; a multi-operator job: one
task group per operator, each with its own DS2 decision and plan), so autoscaling is paused
per job (pause its DAG) and one job's long migration (max_active_runs=1) does not hold the others.
Thin on purpose: every task calls one function of ballast.controller. An unfinished plan from an
earlier run is resumed (emission is idempotent by plan and step), never re-planned. How long emit
and await may take comes from the plan (ballast.deadlines), not from a fixed timeout.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetOrTimeSchedule, AssetWatcher, CronTriggerTimetable, TaskGroup, task
from airflow.sdk.exceptions import AirflowSkipException

from ballast import dag_ids
from ballast.config import JobConfig, load_jobs, schedules
from ballast.protocol import signals_topic
from ballast.sensors import CheckpointSensor
from ballast.tasks import EmitPlanOperator, verify_plan


def _rebalance_group(cfg: JobConfig) -> None:
    """collect → evaluate → place_and_plan → emit → await_checkpoints → verify for `cfg`."""
    rb = cfg.rebalance

    @task(task_id="collect")
    def collect(job: str = cfg.job, op: str = cfg.operator, **context: Any) -> dict:
        from ballast import controller
        from ballast.config import get_job
        from ballast.hooks import BallastMetricsDbHook

        for events in (context.get("triggering_asset_events") or {}).values():  # woken by the job's signal
            for ev in events:
                sig = (ev.extra or {}).get("payload") or {}
                print(f"woken by {sig.get('job')}/{sig.get('operator')}'s signal at epoch {sig.get('epoch')}: "
                      f"{sig.get('detail')}")
        try:
            return controller.collect(BallastMetricsDbHook().url(), get_job(job).for_operator(op))
        except controller.NotReady as exc:
            raise AirflowSkipException(str(exc)) from exc

    @task(task_id="evaluate")
    def evaluate(snap: dict, job: str = cfg.job, op: str = cfg.operator) -> dict:
        from ballast import controller
        from ballast.config import get_job
        from ballast.hooks import BallastMetricsDbHook

        if snap["status"] == "resume":
            return {"action": "resume", "plan_id": snap["plan_id"], "reason": snap["reason"]}
        return controller.evaluate(BallastMetricsDbHook().url(), get_job(job).for_operator(op), snap)

    @task(task_id="place_and_plan")
    def plan(snap: dict, decision: dict, job: str = cfg.job, op: str = cfg.operator) -> str:
        from ballast import controller
        from ballast.config import get_job
        from ballast.hooks import BallastMetricsDbHook

        if decision["action"] == "resume":
            print(decision["reason"])
            return decision["plan_id"]
        if decision["action"] == "no_change":
            raise AirflowSkipException(f"no change: {decision['reason']}")
        out = controller.plan_rebalance(BallastMetricsDbHook().url(), get_job(job).for_operator(op), snap, decision)
        if out is None:
            raise AirflowSkipException("placement keeps every bin where it is: nothing to migrate")
        return out["plan_id"]

    @task(task_id="verify")
    def verify(plan_id: str) -> dict:
        return verify_plan(plan_id)

    snap = collect()
    plan_id = plan(snap, evaluate(snap))
    emit = EmitPlanOperator(task_id="emit", plan_id=plan_id, poll_interval=rb.poll_interval_s)
    wait = CheckpointSensor(task_id="await_checkpoints", plan_id=plan_id, poke_interval=rb.poll_interval_s)
    emit >> wait >> verify(plan_id)


def dag_id(job: str) -> str:
    return dag_ids.rebalance(job)


def signals_asset(cfg: JobConfig) -> Asset:
    """The job's signals as an Airflow asset: a watcher (the Kafka provider's trigger, in the
    triggerer) turns each accepted record of `<job>.signals` into an asset event at once."""
    from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger

    trigger = AwaitMessageTrigger(topics=[signals_topic(cfg.job)], apply_function="ballast.watch.accept_signal",
                                  kafka_config_id=cfg.rebalance.watch_conn_id, poll_timeout=1, poll_interval=1)
    return Asset(name=f"ballast_signals__{cfg.job}", uri=f"ballast://{cfg.job}/signals",
                 watchers=[AssetWatcher(name=f"ballast_signals__{cfg.job}", trigger=trigger)])


def dag_schedule(cfg: JobConfig, cron: str | None) -> str | list[Asset] | AssetOrTimeSchedule | None:
    """The cron schedule (the safety net) or'ed with the job's signals. A null schedule: the
    signals only; a job with `signal_epochs: 0`: the cron only (both: manual runs only)."""
    if cfg.rebalance.signal_epochs == 0:
        return cron
    if cron is None:
        return [signals_asset(cfg)]
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=[signals_asset(cfg)])


def make_dag(cfg: JobConfig, schedule: str | None) -> DAG:
    """The rebalance DAG of one job."""
    with DAG(
        dag_id=dag_id(cfg.job),
        description=f"DS2 autoscaling and skew rebalancing of Ballast job {cfg.job} by live bin migration",
        schedule=dag_schedule(cfg, schedule),
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=timedelta(hours=2),
        default_args={"retries": 0},
        tags=["ballast", "rebalance", f"job:{cfg.job}"],
        doc_md=__doc__,
    ) as dag:
        if not cfg.operators:
            _rebalance_group(cfg)
        for name in [o.name for o in cfg.operators]:  # a chain: each operator decided and migrated on its own
            with TaskGroup(group_id=name):
                _rebalance_group(cfg.for_operator(name))
    return dag


def make_dags(jobs: dict[str, JobConfig], schedule: str | None) -> dict[str, DAG]:
    """One rebalance DAG per configured job, by dag_id."""
    return {dag_id(job): make_dag(cfg, schedule) for job, cfg in jobs.items()}


globals().update(make_dags(load_jobs(), schedules()["rebalance"]))
