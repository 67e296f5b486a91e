"""ballast_migrate: a migration started by a person — a new worker count, or chosen bins to chosen workers.

Trigger it from the UI form (every field has a title and a description) or with
`airflow dags trigger ballast_migrate --conf '{"job": "clicks", "target_workers": 2}'`.
Field values are checked against their JSON schema before the run is created; the combination
(worker count *or* moves, bins in range, bounds of the job) is checked by the first task, which
emits nothing when it fails. `dry_run` prints the plan with its predicted duration and pauses.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ballast.config import JobConfig, load_jobs
from ballast.operators import EmitPlanOperator
from ballast.sensors import CheckpointSensor

STRATEGIES = ["auto", "all-at-once", "fluid", "batched"]


def migrate_params(jobs: dict[str, JobConfig]) -> dict[str, Param]:
    names = sorted(jobs)
    job_schema: dict = {"type": "string", "minLength": 1}
    if names:
        job_schema["enum"] = names
    return {
        "job": Param(names[0] if names else "", title="Job",
                     description="The streaming job to migrate (as named in dags/ballast_jobs.yaml).", **job_schema),
        "target_workers": Param(None, type=["null", "integer"], minimum=1, maximum=1024, title="Target workers",
                                description="New number of workers; Ballast picks which bins move (skew-aware, "
                                            "fewest bytes). Leave empty when you list moves instead."),
        "moves": Param([], type="array", title="Moves",
                       description='Explicit bin moves instead of a worker count, e.g. [{"bin": 7, "to": 1}]. '
                                   "Workers are numbered from 0; naming a worker beyond the current count adds it.",
                       items={"type": "object", "additionalProperties": False, "required": ["bin", "to"],
                              "properties": {"bin": {"type": "integer", "minimum": 0},
                                             "to": {"type": "integer", "minimum": 0}}}),
        "strategy": Param("auto", enum=STRATEGIES, title="Strategy",
                          description="auto: cheapest plan whose predicted pause fits the budget; all-at-once: "
                                      "one step; fluid: one bin per step; batched: each worker sends and receives "
                                      "at most one bin per step."),
        "step_size": Param(None, type=["null", "integer"], minimum=1, title="Bins per step",
                           description="Upper bound on bins moved per step (batched). Empty: no bound."),
        "gap_seconds": Param(0.0, type="number", minimum=0, maximum=3600, title="Gap between steps (s)",
                             description="Wait at least this long between two steps, to let latency recover."),
        "emit_mode": Param("flow-control", enum=["flow-control", "prepared-ahead"], title="Emission",
                           description="flow-control: send a step after the previous one's checkpoint; "
                                       "prepared-ahead: send all at once with spaced effective times."),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="Only print the plan with its predicted duration and pauses; send nothing. "
                                     "Untick to migrate."),
        "reason": Param("manual migration", type="string", maxLength=500, title="Reason",
                        description="Recorded with the plan and carried in every control message."),
    }


def make_dag(jobs: dict[str, JobConfig]) -> DAG:
    with DAG(
        dag_id="ballast_migrate",
        description="Manual live migration of a Ballast job: worker count or chosen bins",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        params=migrate_params(jobs),
        render_template_as_native_obj=False,
        default_args={"retries": 0},
        tags=["ballast"],
        doc_md=__doc__,
    ) as dag:

        @task(task_id="validate_and_plan")
        def plan(params: dict | None = None) -> str:
            from ballast import controller
            from ballast.config import ConfigError, get_job
            from ballast.hooks import BallastMetricsDbHook

            assert params is not None
            try:
                cfg = get_job(params["job"])
                out = controller.plan_manual(BallastMetricsDbHook().url(), cfg, dict(params))
            except (ConfigError, controller.InvalidRequest) as exc:
                raise AirflowFailException(f"invalid migration request, nothing was sent: {exc}") from exc
            print(out["rendered"])
            if out.get("dry_run"):
                raise AirflowSkipException("dry run: plan printed above, nothing stored or sent")
            return out["plan_id"]

        @task(task_id="verify")
        def verify(plan_id: str) -> dict:
            from ballast import controller
            from ballast.hooks import BallastMetricsDbHook

            try:
                out = controller.verify(BallastMetricsDbHook().url(), plan_id)
            except controller.PlanFailed as exc:
                raise AirflowFailException(str(exc)) from exc
            print(out["summary"])
            return {k: v for k, v in out.items() if k != "summary"}

        timeout = max((c.rebalance.await_timeout_s for c in jobs.values()), default=600.0)
        plan_id = plan()
        emit = EmitPlanOperator(task_id="emit", plan_id=plan_id, timeout_s=timeout)
        wait = CheckpointSensor(task_id="await_checkpoints", plan_id=plan_id, timeout=timeout)
        emit >> wait >> verify(plan_id)
    return dag


dag = make_dag(load_jobs())
