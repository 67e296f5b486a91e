"""A reference step applier for control-plane tests until the Spark data plane lands.

It does what the data plane does with control messages, minus the state: consumes the real
`<job>.control` topic, checks each step's expected map version and move sources (rejecting with
a reason, never half-applying), honours effective_at, records the new routing map version and a
step checkpoint in the metrics DB. It also records every message it saw, so tests can
assert that nothing was emitted twice. It is not a fake of the controller under test: the emitter,
trigger, sensor and verifier all run for real against the broker and the DB.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from kafka import KafkaConsumer, TopicPartition

from ballast import store
from ballast.protocol import ControlStep, ProtocolError, control_topic, parse_control
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.jobs import seed_job

# seed_job lives in tests.helpers.jobs; the control-plane tests import it from here too
__all__ = ["StepApplier", "apply_step", "seed_job"]


class StepApplier(threading.Thread):
    def __init__(self, bootstrap: str, db_url: str, job: str, operator: str = "keycount",
                 reject: dict[int, str] | None = None, hold_steps: set[int] | None = None) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.db_url, self.job, self.operator = bootstrap, db_url, job, operator
        self.reject = reject or {}
        self.hold_steps = hold_steps or set()  # steps received but never answered (a stuck job)
        self.seen: list[tuple[str, int, int]] = []  # (plan_id, step, offset)
        self.applied_at: dict[tuple[str, int], datetime] = {}
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def run(self) -> None:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=200)
        consumer.assign([TopicPartition(control_topic(self.job), 0)])
        consumer.seek_to_beginning()
        try:
            while not self._halt.is_set():
                for rec in consumer:
                    self._handle(rec.value, rec.offset)
                    if self._halt.is_set():
                        break
        finally:
            consumer.close()

    def _handle(self, raw: bytes, offset: int) -> None:
        try:
            msg = parse_control(raw)
        except ProtocolError:
            return
        self.seen.append((msg.plan_id, msg.step, offset))
        if msg.step in self.hold_steps:
            return
        if msg.step in store.checkpoints(self.db_url, msg.plan_id):
            return  # duplicate: idempotent
        while datetime.now(UTC) < msg.effective_at and not self._halt.is_set():
            time.sleep(0.02)
        applied = apply_step(self.db_url, self.job, self.operator, msg, self.reject.get(msg.step, ""))
        if applied is not None:
            self.applied_at[(msg.plan_id, msg.step)] = applied


def apply_step(db_url: str, job: str, operator: str, msg: ControlStep, reject: str = "") -> datetime | None:
    """What the data plane records for one step, at once: a rejection with its reason (`reject`,
    or a map version or move source that does not match), or the new routing map version and an
    applied checkpoint. Returns when it was applied (None: rejected). For tests that need a plan carried out but
    no broker."""
    cur = store.latest_map(db_url, job, operator)
    assert cur is not None
    now = datetime.now(UTC)
    reason = reject
    if not reason and msg.map_version != cur.map_version:
        reason = f"expected map v{msg.map_version}, job is at v{cur.map_version}"
    new = list(cur.assignment)
    for mv in msg.moves:
        if not reason and new[mv.bin] != mv.src:
            reason = f"bin {mv.bin} is on worker {new[mv.bin]}, not {mv.src}"
        new[mv.bin] = mv.dst
    with session_scope(db_url) as s:
        if reason:
            s.add(m.StepCheckpoint(job=job, operator=operator, plan_id=msg.plan_id, step=msg.step,
                                   status="rejected", applied_epoch=None, applied_at=None, completed_at=now,
                                   reason=reason, map_version_after=cur.map_version))
            return None
        epoch = cur.epoch + 1
        s.add(m.RoutingMap(job=job, operator=operator, map_version=cur.map_version + 1, epoch=epoch,
                           workers=msg.workers, assignment=new, created_at=now, plan_id=msg.plan_id,
                           step=msg.step))
        s.add(m.StepCheckpoint(job=job, operator=operator, plan_id=msg.plan_id, step=msg.step,
                               status="applied", applied_epoch=epoch, applied_at=now,
                               completed_at=datetime.now(UTC), bins_moved=len(msg.moves),
                               keys_moved=10 * len(msg.moves), bytes_moved=1000 * len(msg.moves),
                               migration_ms=5.0 * len(msg.moves), map_version_after=cur.map_version + 1))
    return now
