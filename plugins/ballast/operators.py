"""EmitPlanOperator: emit a stored plan's steps, deferring between steps in flow-control mode.

Flow control needs "send k+1 after k's checkpoint". Doing that in one task that sleeps would hold
a worker slot for the whole migration; instead the operator sends what may be sent, defers to
CheckpointTrigger for the step in flight, and on resume sends the next one — emit → defer → emit.
Every send goes through ControlEmitter, so a retried or re-run task never sends a step twice.
In prepared-ahead mode it sends every step with spaced effective_at and returns at once; the
CheckpointSensor after it waits for the checkpoints.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ballast.emitter import ControlEmitter, EmitError
from ballast.hooks import BallastKafkaHook, BallastMetricsDbHook, BallastSigningHook
from ballast.sensors import handle_checkpoint_event
from ballast.triggers import CheckpointTrigger


class EmitPlanOperator(BaseOperator):
    """Emit plan `plan_id` (templated; empty = skip) on its job's control topic."""

    template_fields: Sequence[str] = ("plan_id", "mode")
    ui_color = "#fce5cd"

    def __init__(self, *, plan_id: str, mode: str = "", timeout_s: float = 600.0, poll_interval: float = 2.0,
                 kafka_conn_id: str = BallastKafkaHook.default_conn_name,
                 db_conn_id: str = BallastMetricsDbHook.default_conn_name, inline_wait_s: float = 30.0,
                 signing_conn_id: str = BallastSigningHook.default_conn_name, **kwargs: Any) -> None:
        # emission is idempotent by (plan, step), so a retry resumes the plan where it stopped
        kwargs.setdefault("retries", 2)
        kwargs.setdefault("retry_delay", timedelta(seconds=5))
        super().__init__(**kwargs)
        self.inline_wait_s = inline_wait_s
        self.plan_id = plan_id
        self.mode = mode  # "" = the plan's own emit_mode
        self.timeout_s = timeout_s
        self.poll_interval = poll_interval
        self.kafka_conn_id = kafka_conn_id
        self.db_conn_id = db_conn_id
        self.signing_conn_id = signing_conn_id

    def execute(self, context: Any) -> Any:
        if not self.plan_id or self.plan_id == "None":
            raise AirflowSkipException("no plan to emit")
        deadline = datetime.now(timezone.utc) + timedelta(seconds=self.timeout_s)
        return self._step(deadline.isoformat())

    def resume(self, context: Any, event: dict[str, Any]) -> Any:
        handle_checkpoint_event(BallastMetricsDbHook(self.db_conn_id).url(), event, self.log)
        return self._step(event["deadline"])

    def _wait_inline(self, url: str, steps: Sequence[int], deadline: str) -> bool:
        """True when every step in `steps` has a checkpoint within `inline_wait_s` (and the deadline)."""
        import time

        from ballast import repository as repo

        left = (datetime.fromisoformat(deadline) - datetime.now(timezone.utc)).total_seconds()
        end = time.monotonic() + max(0.0, min(self.inline_wait_s, left))
        while time.monotonic() < end:
            done = repo.checkpoints(url, self.plan_id)
            if all(s in done for s in steps):
                return True
            time.sleep(min(self.poll_interval, 1.0))
        return False

    def _step(self, deadline: str) -> Any:
        from ballast import repository as repo
        from ballast.controller import fail_plan

        url = BallastMetricsDbHook(self.db_conn_id).url()
        kafka = BallastKafkaHook(self.kafka_conn_id)
        bootstrap = kafka.bootstrap()
        plan = repo.get_plan(url, self.plan_id)
        if plan is None:
            raise AirflowFailException(f"plan {self.plan_id} is not in the metrics DB at {url}")
        mode = self.mode or plan.params.get("emit_mode", "flow-control")
        try:
            with ControlEmitter(bootstrap, url, signing_key=BallastSigningHook(self.signing_conn_id).signing_key(),
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
                        return out.to_dict()
                    # most steps complete within seconds: wait here briefly rather than defer for
                    # each one (a trigger that fires right after deferral races the scheduler)
                    if not self._wait_inline(url, out.waiting_for, deadline):
                        break
        except EmitError as exc:
            raise AirflowFailException(str(exc)) from exc
        if datetime.now(timezone.utc) >= datetime.fromisoformat(deadline):
            handle_checkpoint_event(url, {"status": "timeout", "plan_id": self.plan_id,
                                          "reason": f"deadline {deadline} passed"}, self.log)
        self.defer(
            trigger=CheckpointTrigger(url, self.plan_id, out.waiting_for, deadline, self.poll_interval),
            method_name="resume",
        )
