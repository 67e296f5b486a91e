"""EmitPlanOperator: emit a stored plan's steps, deferring between steps in flow-control mode.

Flow control needs "send k+1 after k's checkpoint". Doing that in one task that sleeps would hold
a worker slot for the whole migration; instead the operator sends what may be sent, defers to
CheckpointTrigger for the step in flight, and on resume sends the next one — emit → defer → emit.
Every send goes through ControlEmitter, so a retried or re-run task never sends a step twice.
In prepared-ahead mode it sends every step with spaced effective_at and returns at once; the
CheckpointSensor after it waits for the checkpoints.

The deadline comes from the plan (ballast.deadlines: predicted work + steps × gap + slack +
margin), computed when the task starts. A broker that does not answer (down, restarting, a
network blip) is retried with exponential backoff until that deadline: nothing unacknowledged is
recorded as emitted, so a retry sends exactly the steps that are still due.

PlanApprovalOperator is Airflow's ApprovalOperator that also records the answer as XCom `answer`
whatever it is: on Reject the stock operator skips its downstream by raising, so it returns nothing,
and the task that cancels the plan needs to say who rejected it (or that nobody answered).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ballast.emitter import ControlEmitter, EmitError, EmitOutcome
from ballast.hooks import BallastKafkaHook, BallastMetricsDbHook, BallastSigningHook
from ballast.links import ConsolePlanLink
from ballast.sensors import handle_checkpoint_event, run_deadline
from ballast.triggers import CheckpointTrigger

NOT_EMITTABLE = ("awaiting_approval", "cancelled")


def broker_unreachable(exc: EmitError) -> bool:
    """True when retrying may succeed: the broker did not answer, as opposed to a wrong request."""
    if exc.transient:
        return True
    from kafka.errors import KafkaConnectionError, RetriableError

    # the producer's constructor wraps "no broker answered the bootstrap" (a KafkaTimeoutError,
    # retriable in kafka-python's own terms) without the flag
    return isinstance(exc.__cause__, (RetriableError, KafkaConnectionError))


def backoff_s(attempt: int, base_s: float = 1.0, cap_s: float = 30.0) -> float:
    """Wait before retry `attempt` (0-based): base · 2^attempt, at most `cap_s`."""
    return min(cap_s, base_s * (2.0 ** max(0, attempt)))


class EmitPlanOperator(BaseOperator):
    """Emit plan `plan_id` (templated; empty = skip) on its job's control topic."""

    template_fields: Sequence[str] = ("plan_id", "mode")
    ui_color = "#fce5cd"
    operator_extra_links = (ConsolePlanLink(),)

    def __init__(self, *, plan_id: str, mode: str = "", poll_interval: float = 2.0,
                 kafka_conn_id: str = BallastKafkaHook.default_conn_name,
                 db_conn_id: str = BallastMetricsDbHook.default_conn_name, inline_wait_s: float = 30.0,
                 signing_conn_id: str = BallastSigningHook.default_conn_name, backoff_base_s: float = 1.0,
                 backoff_cap_s: float = 30.0, **kwargs: Any) -> None:
        # emission is idempotent by (plan, step), so a retry resumes the plan where it stopped
        kwargs.setdefault("retries", 2)
        kwargs.setdefault("retry_delay", timedelta(seconds=5))
        super().__init__(**kwargs)
        self.inline_wait_s = inline_wait_s
        self.plan_id = plan_id
        self.mode = mode  # "" = the plan's own emit_mode
        self.poll_interval = poll_interval
        self.kafka_conn_id = kafka_conn_id
        self.db_conn_id = db_conn_id
        self.signing_conn_id = signing_conn_id
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s

    def execute(self, context: Any) -> Any:
        if not self.plan_id or self.plan_id == "None":
            raise AirflowSkipException("no plan to emit")
        url = BallastMetricsDbHook(self.db_conn_id).url()
        d = run_deadline(url, self.plan_id)
        self.log.info("plan %s: deadline %s", self.plan_id, d.describe())
        deadline = datetime.now(UTC) + timedelta(milliseconds=d.total_ms)
        return self._step(deadline.isoformat())

    def resume(self, context: Any, event: dict[str, Any]) -> Any:
        handle_checkpoint_event(BallastMetricsDbHook(self.db_conn_id).url(), event, self.log)
        return self._step(event["deadline"])

    def _wait_inline(self, url: str, steps: Sequence[int], deadline: str) -> bool:
        """True when every step in `steps` has a checkpoint within `inline_wait_s` (and the deadline)."""
        from ballast import store

        left = (datetime.fromisoformat(deadline) - datetime.now(UTC)).total_seconds()
        end = time.monotonic() + max(0.0, min(self.inline_wait_s, left))
        while time.monotonic() < end:
            done = store.checkpoints(url, self.plan_id)
            if all(s in done for s in steps):
                return True
            time.sleep(min(self.poll_interval, 1.0))
        return False

    def _emit_round(self, url: str, mode: str, deadline: str) -> tuple[EmitOutcome, bool]:
        """Send what is due until a step is still in flight after the inline wait; (outcome, finished)."""
        from ballast.controller import fail_plan

        kafka = BallastKafkaHook(self.kafka_conn_id)
        with ControlEmitter(kafka.bootstrap(), url, signing_key=BallastSigningHook(self.signing_conn_id).signing_key(),
                            security=kafka.security()) as em:
            while True:
                out = em.emit(self.plan_id, mode)  # type: ignore[arg-type]
                if out.failed_step is not None:
                    msg = fail_plan(url, self.plan_id, f"plan {self.plan_id} failed: {out.failed_reason}",
                                    "plan_rejected")
                    raise AirflowFailException(msg)
                self.log.info("plan %s (%s): sent now %s, sent before %s, waiting for %s", self.plan_id, mode,
                              [e.step for e in out.emitted], out.already_emitted, out.waiting_for)
                if mode == "prepared-ahead" or not out.waiting_for:
                    return out, True
                # most steps complete within seconds: wait here briefly rather than defer for
                # each one (a trigger that fires right after deferral races the scheduler)
                if not self._wait_inline(url, out.waiting_for, deadline):
                    return out, False

    def _emit_with_retry(self, url: str, mode: str, deadline: str) -> tuple[EmitOutcome, bool]:
        """`_emit_round`, retried with backoff while the broker is unreachable and the deadline allows."""
        from ballast.controller import fail_plan

        attempt = 0
        while True:
            try:
                return self._emit_round(url, mode, deadline)
            except EmitError as exc:
                if not broker_unreachable(exc):
                    raise AirflowFailException(str(exc)) from exc
                wait = backoff_s(attempt, self.backoff_base_s, self.backoff_cap_s)
                left = (datetime.fromisoformat(deadline) - datetime.now(UTC)).total_seconds()
                if wait >= left:
                    msg = fail_plan(url, self.plan_id, f"plan {self.plan_id}: the Kafka broker stayed unreachable "
                                    f"until the plan's deadline {deadline} ({attempt + 1} attempt(s)): {exc}",
                                    "plan_timeout")
                    raise AirflowFailException(msg) from exc
                attempt += 1
                msg = (f"plan {self.plan_id}: broker unreachable (attempt {attempt}: "
                       f"{str(exc).splitlines()[0][:300]}); retrying in {wait:.0f} s ({left:.0f} s left "
                       "before the deadline)")
                self.log.warning(msg)
                self._event(url, "emit_retry", msg)
                time.sleep(wait)

    def _event(self, url: str, kind: str, message: str) -> None:
        """An events row for the console (the outage shows next to the plan), best effort."""
        from ballast import store

        plan = store.get_plan(url, self.plan_id)
        if plan is not None:
            store.add_event(url, plan.job, plan.operator, "warning", kind, message, details={"plan_id": self.plan_id})

    def _step(self, deadline: str) -> Any:
        from ballast import store

        url = BallastMetricsDbHook(self.db_conn_id).url()
        plan = store.get_plan(url, self.plan_id)
        if plan is None:
            raise AirflowFailException(f"plan {self.plan_id} is not in the metrics DB at {url}")
        if plan.status in NOT_EMITTABLE:
            raise AirflowFailException(f"plan {self.plan_id} is {plan.status}: only an approved plan is emitted; "
                                       "approve it in ballast_migrate or plan a new migration")
        mode = self.mode or plan.params.get("emit_mode", "flow-control")
        out, finished = self._emit_with_retry(url, mode, deadline)
        if finished:
            return out.to_dict()
        if datetime.now(UTC) >= datetime.fromisoformat(deadline):
            handle_checkpoint_event(url, {"status": "timeout", "plan_id": self.plan_id,
                                          "reason": f"deadline {deadline} passed"}, self.log)
        self.defer(
            trigger=CheckpointTrigger(self.db_conn_id, self.plan_id, out.waiting_for, deadline, self.poll_interval),
            method_name="resume",
        )


class PlanApprovalOperator(ApprovalOperator):
    """Approve / Reject a stored plan; XCom `answer` = {"choice", "by", "timed_out"} in every case."""

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if "error" not in event:
            by = event.get("responded_by_user")
            context["ti"].xcom_push(key="answer", value={
                "choice": (event.get("chosen_options") or [None])[0],
                "by": by.get("name") if isinstance(by, dict) else None,
                "timed_out": bool(event.get("timedout")),
            })
        return super().execute_complete(context, event)


def verify_plan(plan_id: str) -> dict[str, Any]:
    """The body of every DAG's `verify` task: the plan's outcome, or the task fails with why (a
    rejected step's reason from the job, a step that never came back), so the DAG run says it."""
    from ballast import controller

    try:
        out = controller.verify(BallastMetricsDbHook().url(), plan_id)
    except controller.PlanFailed as exc:
        raise AirflowFailException(str(exc)) from exc
    print(out["summary"])
    return {k: v for k, v in out.items() if k != "summary"}
