"""CheckpointSensor: wait (deferred, in the triggerer) until a plan's steps are checkpointed.

On a rejected step or a timeout the plan is marked failed in the metrics DB (plans.status and an
Event row) before the task fails, so the next rebalance run does not resume it and nothing more
is emitted for it; the task log says what the operator should do. How long to wait comes from
the plan (`run_deadline`, ballast.deadlines), not from a fixed timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ballast import store
from ballast.deadlines import Deadline, for_plan
from ballast.hooks import BallastMetricsDbHook
from ballast.links import ConsolePlanLink
from ballast.triggers import CheckpointTrigger


def run_deadline(url: str, plan_id: str) -> Deadline:
    """The deadline of a stored plan under its job's settings (read at run time, so it is the plan
    that will be emitted, not the one the DAG file was parsed with)."""
    from ballast.config import ConfigError, get_job

    plan = store.get_plan(url, plan_id)
    if plan is None:
        raise AirflowFailException(f"plan {plan_id} is not in the metrics DB at {url}")
    try:
        cfg = get_job(plan.job)
    except ConfigError as exc:
        raise AirflowFailException(f"plan {plan_id}: {exc}; put the job back in the jobs file to finish it") from exc
    return for_plan(plan.predicted_ms, plan.steps, plan.params, cfg.rebalance)


def handle_checkpoint_event(db_url: str, event: dict[str, Any], log: Any) -> None:
    """Shared by the sensor and the emit operator: turn a trigger event into success or a failed plan."""
    from ballast.controller import fail_plan

    status, plan_id = event.get("status"), event.get("plan_id", "")
    if status == "done":
        log.info("plan %s: step(s) %s checkpointed", plan_id, event.get("steps"))
        return
    if status == "rejected":
        msg = fail_plan(db_url, plan_id, f"plan {plan_id} failed: {event.get('reason')}", "plan_rejected")
    elif status == "timeout":
        msg = fail_plan(db_url, plan_id, f"plan {plan_id} timed out: {event.get('reason')}", "plan_timeout")
    else:
        msg = fail_plan(db_url, plan_id, f"plan {plan_id}: unexpected trigger event {event!r}", "plan_failed")
    log.error(msg)
    raise AirflowFailException(msg)


class CheckpointSensor(BaseSensorOperator):
    """Wait for the step checkpoints of `plan_id` (all steps unless `steps` is given).

    `plan_id` is templated (typically pulled from the plan task's XCom); an empty plan_id means
    there is nothing to wait for and the task is skipped. Deferrable by default: it frees its
    worker slot while waiting. The wait ends at the plan's deadline (`run_deadline`), counted from
    the sensor's start.
    """

    template_fields: Sequence[str] = ("plan_id",)
    ui_color = "#d9ead3"
    operator_extra_links = (ConsolePlanLink(),)

    def __init__(self, *, plan_id: str, steps: list[int] | None = None,
                 db_conn_id: str = BallastMetricsDbHook.default_conn_name, deferrable: bool = True,
                 poke_interval: float = 2.0, **kwargs: Any) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.plan_id = plan_id
        self.steps = steps
        self.db_conn_id = db_conn_id
        self.deferrable = deferrable

    def _url(self) -> str:
        return BallastMetricsDbHook(self.db_conn_id).url()

    def _steps(self, url: str) -> list[int]:
        if self.steps:
            return list(self.steps)
        plan = store.get_plan(url, self.plan_id)
        if plan is None:
            raise AirflowFailException(f"plan {self.plan_id} is not in the metrics DB at {url}")
        return list(range(1, plan.steps + 1))

    def poke(self, context: Any) -> bool:
        from ballast.controller import progress

        url = self._url()
        pr = progress(url, self.plan_id, self._steps(url))
        if pr.failed_step is not None:
            handle_checkpoint_event(url, {"status": "rejected", "plan_id": self.plan_id,
                                          "reason": pr.failed_reason}, self.log)
        return pr.done

    def execute(self, context: Any) -> Any:
        if not self.plan_id or self.plan_id == "None":
            raise AirflowSkipException("no plan to wait for")
        url = self._url()
        d = run_deadline(url, self.plan_id)
        self.timeout = d.total_ms / 1000.0
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            self.log.info("plan %s: every awaited step is already checkpointed", self.plan_id)
            return self.plan_id
        self.log.info("plan %s: waiting until the deadline %s", self.plan_id, d.describe())
        deadline = datetime.now(UTC) + timedelta(milliseconds=d.total_ms)
        self.defer(
            trigger=CheckpointTrigger(self.db_conn_id, self.plan_id, self._steps(url), deadline.isoformat(),
                                      self.poke_interval),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        handle_checkpoint_event(self._url(), event, self.log)
        return self.plan_id
