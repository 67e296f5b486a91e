"""ballast_upgrade: put another version of a job's stateful processor in force, live.

Trigger it from the UI form or with `airflow dags trigger ballast_upgrade --conf
'{"job": "sessions", "code": "counts_v2:Counter", "version": "2", "py_files": ["/srv/code/counts_v2.py"],
"dry_run": false}'`. The first task checks the request's form and that no plan is open, and stores
a one-step upgrade plan; the job then ships the version's files to its executors, imports it on the
driver and the executors, and applies it at an epoch boundary — with strategy `shadow` only after
it ran beside the version in force for some epochs, its outputs held back and compared — or
rejects it whole (a module that does not import, a class that says another version, a changed
query, no StateUpgrade from the version in force, a migration under way, outputs that differ in
the shadow), and this run fails with that reason. Each key's state is
carried over by the version's declared StateUpgrade the first time the new version handles it.
A rollback is an upgrade to the earlier version (its label and class again), which the newer
version's StateUpgrade back makes possible. docs/operators.md, "Upgrading a processor live".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ballast import dag_ids
from ballast.code_version import MAX_PATH_CHARS, MAX_PY_FILES, MAX_REF_CHARS, MAX_SHADOW_EPOCHS, MAX_VERSION_CHARS
from ballast.config import JobConfig, load_jobs
from ballast.sensors import CheckpointSensor
from ballast.tasks import EmitPlanOperator, verify_plan

DAGRUN_TIMEOUT = timedelta(hours=1)


def upgrade_params(jobs: dict[str, JobConfig]) -> dict[str, Param]:
    names = sorted(jobs)
    job_schema: dict = {"type": "string", "minLength": 1}
    if names:
        job_schema["enum"] = names
    return {
        "job": Param(names[0] if names else "", title="Job",
                     description="The streaming job whose processor is upgraded (dags/ballast_jobs.yaml).",
                     **job_schema),
        "operator": Param(None, type=["null", "string"], maxLength=100, title="Operator",
                          description="For a job with several operators: the one upgraded. Empty: the job's "
                                      "`operator`."),
        "code": Param("", type="string", minLength=3, maxLength=MAX_REF_CHARS,
                      pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", title="Code (package.module:Class)",
                      description="The processor class of the new version. Give each version a module of its "
                                  "own (sessions_v2:Sessions): the executors' Python workers keep a module "
                                  "they imported once."),
        "version": Param("", type="string", minLength=1, maxLength=MAX_VERSION_CHARS,
                         pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$", title="Version",
                         description="Its label; the class's ballast_version must say the same. To roll back, "
                                     "give an earlier version's label and class."),
        "py_files": Param([], type="array", maxItems=MAX_PY_FILES, title="Python files",
                          description="Paths on the job's driver (.py, .zip, .egg) shipped to every executor "
                                      "before the version runs. Empty: its module is importable there already.",
                          items={"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS}),
        "strategy": Param("direct", enum=["direct", "shadow"], title="Strategy",
                          description="direct: the new version takes over at the step's epoch. shadow: it first "
                                      "runs beside the version in force on the same input, on a copy of the state, "
                                      "its outputs held back and compared; it takes over only if they agree. Either "
                                      "way each key's state is carried over the first time the new version handles "
                                      "it."),
        "shadow_epochs": Param(3, type="integer", minimum=1, maximum=MAX_SHADOW_EPOCHS, title="Shadow epochs",
                               description="shadow: how many epochs with input the two versions are compared."),
        "tolerance": Param(0.0, type="number", minimum=0, maximum=1, title="Tolerance",
                           description="shadow: the largest share of handler calls whose outputs may differ (or "
                                       "that raise) for the new version to take over. 0: they must all agree."),
        "compare_fields": Param([], type="array", maxItems=50, title="Compared fields",
                                description="shadow: the output fields compared (e.g. key, count). Empty: whole "
                                            "rows (a version that adds a field then never agrees).",
                                items={"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"}),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="Only print what would be sent; store and send nothing. Untick to upgrade."),
        "reason": Param("manual upgrade", type="string", maxLength=500, title="Reason",
                        description="Recorded with the plan and carried in the control message."),
    }


def make_dag(jobs: dict[str, JobConfig]) -> DAG:
    with DAG(
        dag_id=dag_ids.UPGRADE,
        description="Live code upgrade of a Ballast job's stateful processor (or a rollback)",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        params=upgrade_params(jobs),
        dagrun_timeout=DAGRUN_TIMEOUT,
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
                if params.get("operator"):
                    cfg = cfg.for_operator(params["operator"])
                out = controller.plan_upgrade(BallastMetricsDbHook().url(), cfg, dict(params))
            except (ConfigError, controller.InvalidRequest) as exc:
                raise AirflowFailException(f"invalid upgrade request, nothing was stored or sent: {exc}") from exc
            print(out["rendered"])
            if params.get("dry_run"):
                raise AirflowSkipException("dry run: the upgrade is printed above, nothing stored or sent")
            return out["plan_id"]

        @task(task_id="verify")
        def verify(plan_id: str) -> dict:
            return verify_plan(plan_id)

        stored = plan()
        emit = EmitPlanOperator(task_id="emit", plan_id=stored)
        wait = CheckpointSensor(task_id="await_checkpoint", plan_id=stored)
        emit >> wait >> verify(stored)
    return dag


dag = make_dag(load_jobs())
