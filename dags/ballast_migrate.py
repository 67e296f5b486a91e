"""ballast_migrate: a migration started by a person — a new worker count, or chosen bins to chosen workers.

Trigger it from the UI form (every field has a title and a description) or with
`airflow dags trigger ballast_migrate --conf '{"job": "clicks", "target_workers": 2}'`.
Field values are checked against their JSON schema before the run is created; the combination
(worker count *or* moves, bins in range, bounds of the job, a deadline that fits this DAG's
`dagrun_timeout`) is checked by the first task, which stores and emits nothing when it fails.
`dry_run` prints the plan with its predicted duration and pauses, and each bin's move mode (transfer,
pre-copy or handover) and why; `move_mode` forces one.

Otherwise the plan is stored as `awaiting_approval` and the `approve` task (Airflow's
human-in-the-loop ApprovalOperator; "Required Actions" in the UI, or the REST API's
`hitlDetails`) shows it. Approve: the plan becomes `planned` and exactly that plan is emitted,
awaited and verified. Reject, or no answer within an hour: the plan is `cancelled` and nothing
is sent.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ballast import dag_ids
from ballast.config import JobConfig, load_jobs
from ballast.options import EMIT_MODES, MOVE_MODES, ORDERS, STRATEGIES
from ballast.sensors import CheckpointSensor
from ballast.tasks import EmitPlanOperator, PlanApprovalOperator, verify_plan

DAGRUN_TIMEOUT = timedelta(hours=6)
APPROVAL_TIMEOUT = timedelta(hours=1)  # then the default answer, Reject, cancels the plan



def migrate_params(jobs: dict[str, JobConfig]) -> dict[str, Param]:
    names = sorted(jobs)
    job_schema: dict = {"type": "string", "minLength": 1}
    if names:
        job_schema["enum"] = names
    return {
        "job": Param(names[0] if names else "", title="Job",
                     description="The streaming job to migrate (as named in dags/ballast_jobs.yaml).", **job_schema),
        "operator": Param(None, type=["null", "string"], maxLength=100, title="Operator",
                          description="For a job with several operators (`operators:`): the one whose bins move. "
                                      "Empty: the job's `operator` (the first of a chain)."),
        "target_workers": Param(None, type=["null", "integer"], minimum=1, maximum=1024, title="Target workers",
                                description="New number of workers; Ballast picks which bins move (skew-aware, "
                                            "fewest bytes). Leave empty when you list moves instead."),
        "moves": Param([], type="array", title="Moves",
                       description='Explicit bin moves instead of a worker count, e.g. [{"bin": 7, "to": 1}]. '
                                   "Workers are numbered from 0; naming a worker beyond the current count adds it.",
                       items={"type": "object", "additionalProperties": False, "required": ["bin", "to"],
                              "properties": {"bin": {"type": "integer", "minimum": 0},
                                             "to": {"type": "integer", "minimum": 0}}}),
        "split_to": Param(None, type=["null", "integer"], minimum=2, maximum=65536, title="Split to bins",
                          description="Raise the bin count to this power of two (a split: nothing moves, each "
                                      "bin's parts stay on its worker). Alone: no target workers, no moves."),
        "merge_to": Param(None, type=["null", "integer"], minimum=1, maximum=32768, title="Merge to bins",
                          description="Lower the bin count to this power of two (a merge, the inverse of a split): "
                                      "parts that do not share a worker move together first, then one merge step "
                                      "moves no key. Alone: no target workers, no moves, no split."),
        "trigger_ms": Param(None, type=["null", "integer"], minimum=0, maximum=3_600_000,
                            title="Trigger interval (ms)",
                            description="Change the job's interval between epochs, live (a settings step: the job "
                                        "restarts its streaming query in its own process; nothing moves). "
                                        "Alone, or with Max records per epoch: no target workers, moves or split."),
        "max_records_per_epoch": Param(None, type=["null", "integer"], minimum=0, maximum=2**31 - 1,
                                       title="Max records per epoch",
                                       description="Change the most input records one epoch reads, live (Spark's "
                                                   "maxOffsetsPerTrigger; 0 lifts the cap). A settings step, as "
                                                   "Trigger interval."),
        "strategy": Param("auto", enum=list(STRATEGIES), title="Strategy",
                          description="auto: cheapest plan whose predicted pause fits the budget; all-at-once: "
                                      "one step; fluid: one bin per step; batched: each worker sends and receives "
                                      "at most one bin per step."),
        "step_size": Param(None, type=["null", "integer"], minimum=1, title="Bins per step",
                           description="Upper bound on bins moved per step (batched). Empty: no bound."),
        "order": Param(None, type=["null", "string"], enum=[None, *ORDERS], title="Order",
                       description="Which bins move first (empty: the job's rebalance.order). hot-first moves "
                                   "the most loaded bins early; largest-first the biggest states."),
        "byte_budget": Param(None, type=["null", "integer"], minimum=1, title="Bytes per step",
                             description="Upper bound on state bytes moved per step (batched). Empty: no bound."),
        "gap_seconds": Param(0.0, type="number", minimum=0, maximum=3600, title="Gap between steps (s)",
                             description="Wait at least this long between two steps, to let latency recover."),
        "move_mode": Param("auto", enum=list(MOVE_MODES), title="Move mode",
                           description="How the bins move. auto: per bin by the cost model — transfer when its "
                                       "pause fits the job's pause budget, handover at a window boundary (no state "
                                       "moved) when the operator declares windows and their wait fits the step "
                                       "budget, else pre-copy; the dry run says which and why. transfer, precopy, "
                                       "handover: every bin so (a handover needs declared windows and keeps the "
                                       "worker count: the step that changes it moves by pre-copy)."),
        "emit_mode": Param("flow-control", enum=list(EMIT_MODES), title="Emission",
                           description="flow-control: send a step after the previous one's checkpoint; "
                                       "prepared-ahead: send all at once with spaced effective times."),
        "dry_run": Param(True, type="boolean", title="Dry run",
                         description="Only print the plan with its predicted duration and pauses; send nothing. "
                                     "Untick to migrate."),
        "reason": Param("manual migration", type="string", maxLength=500, title="Reason",
                        description="Recorded with the plan and carried in every control message."),
        "take_over": Param(None, type=["null", "string"], maxLength=200, title="Take over plan",
                           description="A plan id whose run is gone (see the console's plans): this run emits "
                                       "and verifies that stored plan instead of planning a new one. The "
                                       "other fields are then ignored."),
        "force": Param(False, type="boolean", title="Force take-over",
                       description="Take the plan over even if its owner run was seen in the last minutes. "
                                   "Only when you know that run is stopped: two live runs would both emit."),
    }


def _approval_body(plan_id: str, job: str, rendered: str, deadline: str, wait: timedelta) -> str:
    """What the approver reads (Markdown): the stored plan, its steps and moves, its deadline."""
    return (f"**Job** `{job}` · **plan** `{plan_id}`\n\n"
            f"Approve to emit exactly this plan. Reject — or no answer within {wait} — cancels it; "
            "nothing is sent.\n\n"
            f"```\n{rendered}\n```\n\n**Deadline once approved:** {deadline}\n")


def make_dag(jobs: dict[str, JobConfig], approval_timeout: timedelta = APPROVAL_TIMEOUT) -> DAG:
    """The DAG; `approval_timeout`: how long the approval waits before its default answer, Reject."""
    # what is left for emit + await once the approval has used its time
    max_migration = DAGRUN_TIMEOUT - approval_timeout
    with DAG(
        dag_id=dag_ids.MIGRATE,
        description="Manual live migration of a Ballast job: worker count or chosen bins, after approval",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        params=migrate_params(jobs),
        render_template_as_native_obj=False,
        dagrun_timeout=DAGRUN_TIMEOUT,
        default_args={"retries": 0},
        tags=["ballast"],
        doc_md=__doc__,
    ) as dag:

        @task(task_id="validate_and_plan")
        def plan(params: dict | None = None, ti=None) -> str:  # type: ignore[no-untyped-def]
            from ballast import controller, store
            from ballast.config import ConfigError, get_job
            from ballast.deadlines import DeadlineTooLong, check_fits, for_plan
            from ballast.hooks import BallastMetricsDbHook

            assert params is not None
            url = BallastMetricsDbHook().url()
            try:
                cfg = get_job(params["job"])
                if params.get("operator"):
                    cfg = cfg.for_operator(params["operator"])
                if params.get("take_over"):  # a stored plan whose run is gone: this run drives it
                    out = controller.plan_manual(url, cfg, dict(params))
                    print(out["rendered"])
                    ti.xcom_push(key="approval_body", value=_approval_body(
                        out["plan_id"], cfg.job, out["rendered"], "as stored (taken over)", approval_timeout))
                    return out["plan_id"]
                # plan without storing first: a plan that cannot meet its deadline is refused unstored
                dry = controller.plan_manual(url, cfg, {**params, "dry_run": True})
                d = for_plan(dry["predicted_ms"], dry["steps"], dict(params), cfg.rebalance)
                print(dry["rendered"])
                print(f"deadline once approved: {d.describe()}")
                check_fits(d, dry["steps"], max_migration.total_seconds() * 1000.0,
                           f"ballast_migrate allows (dagrun_timeout {DAGRUN_TIMEOUT} minus the approval's "
                           f"{approval_timeout})")
                if params.get("dry_run"):
                    raise AirflowSkipException("dry run: plan printed above, nothing stored or sent")
                out = controller.plan_manual(url, cfg, dict(params))
            except (ConfigError, controller.InvalidRequest, DeadlineTooLong) as exc:
                raise AirflowFailException(f"invalid migration request, nothing was stored or sent: {exc}") from exc
            plan_id = out["plan_id"]
            store.set_plan_status(url, plan_id, "awaiting_approval")
            d = for_plan(out["predicted_ms"], out["steps"], dict(params), cfg.rebalance)
            ti.xcom_push(key="approval_body", value=_approval_body(plan_id, cfg.job, out["rendered"], d.describe(),
                                                                   approval_timeout))
            return plan_id

        approve = PlanApprovalOperator(
            task_id="approve",
            subject="Migrate {{ params.job }}: emit plan {{ ti.xcom_pull(task_ids='validate_and_plan') }}?",
            body="{{ ti.xcom_pull(task_ids='validate_and_plan', key='approval_body') }}",
            defaults="Reject",
            response_timeout=approval_timeout,
        )

        @task(task_id="mark_approved")
        def approved(plan_id: str, params: dict | None = None, ti=None) -> str:  # type: ignore[no-untyped-def]
            from ballast import store
            from ballast.hooks import BallastMetricsDbHook

            url = BallastMetricsDbHook().url()
            rec = store.get_plan(url, plan_id)
            if rec is not None and rec.status in ("planned", "emitting") and (params or {}).get("take_over"):
                store.add_event(url, rec.job, rec.operator, "info", "plan_approved",
                               f"taken-over plan {plan_id} approved to continue", details={"plan_id": plan_id})
                return plan_id
            if rec is None or rec.status != "awaiting_approval":
                raise AirflowFailException(f"plan {plan_id} is {rec.status if rec else 'gone'}, not awaiting approval: "
                                           "nothing was sent; trigger ballast_migrate again")
            answer = ti.xcom_pull(task_ids="approve", key="answer") or {}
            who = answer.get("by") or "unknown"
            store.set_plan_status(url, plan_id, "planned")
            store.add_event(url, rec.job, rec.operator, "info", "plan_approved",
                           f"plan {plan_id} approved by {who}", details={"plan_id": plan_id, "by": who})
            return plan_id

        @task(task_id="cancel_unapproved")
        def cancel(plan_id: str | None, ti=None) -> str:  # type: ignore[no-untyped-def]
            """Teardown: a plan still awaiting approval when the run ends (rejected, timed out, or the
            approval task failed) is cancelled, so it never counts as open and is never emitted."""
            from ballast import store
            from ballast.hooks import BallastMetricsDbHook

            url = BallastMetricsDbHook().url()
            rec = store.get_plan(url, plan_id) if plan_id else None
            if rec is None or rec.status != "awaiting_approval":
                return f"nothing to cancel (plan {plan_id}: {rec.status if rec else 'none'})"
            answer = ti.xcom_pull(task_ids="approve", key="answer") or {}
            if answer.get("timed_out") or (answer.get("choice") and not answer.get("by")):
                why = f"no answer within {approval_timeout}"
            elif answer.get("choice") == PlanApprovalOperator.REJECT:
                why = f"rejected by {answer.get('by')}"
            else:
                why = "the approval task did not complete"
            reason = f"not approved ({why}); nothing was sent"
            store.set_plan_status(url, plan_id, "cancelled", reason=reason, finished=True)
            store.add_event(url, rec.job, rec.operator, "info", "plan_cancelled", f"plan {plan_id}: {reason}",
                           details={"plan_id": plan_id})
            print(f"plan {plan_id} cancelled: {reason}")
            return reason

        @task(task_id="verify")
        def verify(plan_id: str) -> dict:
            return verify_plan(plan_id)

        stored = plan()
        go = approved(stored)
        emit = EmitPlanOperator(task_id="emit", plan_id=go)
        wait = CheckpointSensor(task_id="await_checkpoints", plan_id=go)
        done = verify(go)
        stored >> approve >> go
        emit >> wait >> done >> cancel(stored).as_teardown(setups=stored)
    return dag


dag = make_dag(load_jobs())
