"""CheckpointTrigger: waits in the triggerer for a plan's step checkpoints.

Why a trigger: a migration can take minutes (steps spaced by gaps, slow epochs); polling from a
worker slot for that long wastes the slot and risks the long-task failures in docs/operations.md ("Traps"). The
trigger polls the metrics DB (in a thread: SQLAlchemy is synchronous) and fires once — all awaited
steps applied, a step rejected/superseded, or the deadline passed. The deadline is absolute and
serialized, so a triggerer restart does not extend it. The trigger carries the *connection id*
of the metrics DB, never its URL: trigger kwargs are stored in Airflow's metadata DB and shown in
its API, and a URL would carry the password; the triggerer resolves the connection itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class CheckpointTrigger(BaseTrigger):
    """Fire when steps `steps` of `plan_id` all have an applied checkpoint (or one failed, or time ran out).

    Event payload: {"status": "done" | "rejected" | "timeout", "plan_id", "steps", "missing",
    "failed_step", "reason", "deadline"} (the deadline travels in the event so a deferring operator
    can re-defer with the same one).
    """

    def __init__(self, db_conn_id: str, plan_id: str, steps: list[int], deadline: str,
                 poll_interval: float = 2.0) -> None:
        super().__init__()
        if "://" in db_conn_id:
            raise ValueError("CheckpointTrigger takes the metrics DB's connection id (e.g. 'ballast_metrics_db'), "
                             "not a URL: a URL would be stored with its password in the trigger's kwargs")
        self.db_conn_id = db_conn_id
        self.plan_id = plan_id
        self.steps = [int(s) for s in steps]
        self.deadline = deadline  # ISO-8601 UTC
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "ballast.triggers.CheckpointTrigger",
            {"db_conn_id": self.db_conn_id, "plan_id": self.plan_id, "steps": list(self.steps),
             "deadline": self.deadline, "poll_interval": self.poll_interval},
        )

    def _event(self, status: str, **kw: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "plan_id": self.plan_id, "steps": list(self.steps),
                             "missing": [], "failed_step": None, "reason": "", "deadline": self.deadline, **kw})

    def _url(self) -> str:
        from ballast.hooks import BallastMetricsDbHook

        return BallastMetricsDbHook(self.db_conn_id).url()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from ballast.controller import db_unreachable, progress

        # the connection lookup is synchronous (secrets backends, the supervisor's API): off the loop
        db_url = await asyncio.to_thread(self._url)
        deadline = datetime.fromisoformat(self.deadline)
        self.log.info("waiting for checkpoints of plan %s step(s) %s until %s", self.plan_id, self.steps, self.deadline)
        while True:
            try:
                pr = await asyncio.to_thread(progress, db_url, self.plan_id, self.steps)
            except Exception as exc:
                if not db_unreachable(exc):
                    raise
                # the metrics DB is down: report and keep waiting (the deadline still holds)
                self.log.warning("plan %s: metrics DB unreachable (%s); retrying", self.plan_id,
                                 str(exc).splitlines()[0][:200])
                if datetime.now(UTC) >= deadline:
                    yield self._event("timeout", reason=f"metrics DB unreachable at the deadline {self.deadline}")
                    return
                await asyncio.sleep(self.poll_interval)
                continue
            if pr.failed_step is not None:
                yield self._event("rejected", failed_step=pr.failed_step, reason=pr.failed_reason)
                return
            if pr.done:
                yield self._event("done")
                return
            if datetime.now(UTC) >= deadline:
                yield self._event("timeout", missing=list(pr.missing),
                                  reason=f"no checkpoint for step(s) {list(pr.missing)} by {self.deadline}")
                return
            await asyncio.sleep(self.poll_interval)
