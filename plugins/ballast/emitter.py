"""Emission of a stored plan's steps on `<job>.control`, exactly once per (plan_id, step).

Why kafka-python and not the Airflow Kafka provider: its ProduceToTopicOperator only logs delivery
failures (docs/operations.md, "Traps"); a control step must be acknowledged by every in-sync replica (acks=all) and
we wait on each send's future before recording it as emitted.

Idempotency: a step is sent only by the emitter that claimed it (ballast.store.plans: the claim
records who and when in one conditional UPDATE), and a step whose plan_steps row has `emitted_at`
is never sent again, whatever the mode; a re-run of an interrupted plan therefore starts at the
first step that was not emitted, and in flow-control mode waits for the checkpoint of the step in
flight instead of re-sending it. Two emitters racing on one plan send each step once. The one
window left is a crash between the claim and the DB write of the ack: once the claim expires the
step is sent a second time, which the data plane treats as a duplicate (docs/protocol.md).

Ownership (ballast.store.plans, "owner"): an emitter refuses a plan that another live Airflow run
drives, naming that run. A plan of a shell (`cli:` owner) or of a run whose lease lapsed is taken
over by an emitter started on its id, and the takeover is recorded (`plan_taken_over` event): being
handed that plan id is the explicit act (a scheduled rebalance is handed one only by
ballast.control.collect's rules).

Modes:
* flow-control (default): step k+1 is sent only once step k's checkpoint is in the metrics DB,
  with effective_at = max(now, checkpoint k completed_at + gap).
* prepared-ahead: every remaining step at once, effective_at = now + cumulative gaps.
No Airflow import: the DAG's operators, the tests and a shell can all drive this.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ballast import store
from ballast.errors import BallastError
from ballast.kafka_security import KafkaSecurity, client_kwargs
from ballast.options import EMIT_MODES, EmitMode
from ballast.protocol import ControlStep, acks_topic, control_topic, message_key, parse_control, signals_topic
from ballast.signing import SigningKey, signed_step
from ballast.topics import create_missing_topics

log = logging.getLogger(__name__)
# how long one attempt to reach the broker waits: a shorter outage is ridden out inside the attempt,
# a longer one surfaces as EmitError and EmitPlanOperator retries it with backoff
BOOTSTRAP_TIMEOUT_S = 10.0


class EmitError(BallastError, RuntimeError):
    """Emission cannot proceed; the message says what the operator should do. `transient`: the
    broker did not answer (down, unreachable): re-running the emission may succeed."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class EmittedStep:
    step: int
    partition: int
    offset: int
    effective_at: datetime


@dataclass
class EmitOutcome:
    """What one call did and what the plan is waiting for now."""

    plan_id: str
    emitted: list[EmittedStep] = field(default_factory=list)
    already_emitted: list[int] = field(default_factory=list)
    waiting_for: list[int] = field(default_factory=list)  # steps emitted whose checkpoint is missing
    all_emitted: bool = False
    failed_step: int | None = None  # a rejected/superseded checkpoint stops the plan
    failed_reason: str = ""

    def to_dict(self) -> dict:  # XCom-friendly
        d = dataclasses.asdict(self)
        d["emitted"] = [{**dataclasses.asdict(e), "effective_at": e.effective_at.isoformat()} for e in self.emitted]
        return d


def ensure_control_topics(bootstrap: str, job: str, partitions: int = 1, security: KafkaSecurity | None = None) -> None:
    """Create `<job>.control`, `<job>.control.acks` and `<job>.signals` if missing (the signals
    topic before the job first runs: the rebalance DAG's asset watcher subscribes to it).

    One partition is enough: every step of a (job, operator) goes to one partition by key anyway.
    """
    create_missing_topics(bootstrap, {control_topic(job): partitions, acks_topic(job): partitions,
                                      signals_topic(job): 1}, security=security)


class ControlEmitter:
    """A producer bound to one metrics DB; use as a context manager so the producer is closed.

    `signing_key`: every step is signed with it (ballast.signing); None sends unsigned steps,
    which a job configured with keys rejects. `security`: SASL/TLS of the broker connection
    (default BALLAST_KAFKA_CONFIG, else PLAINTEXT).
    """

    def __init__(self, bootstrap: str, db_url: str, send_timeout_s: float = 30.0,
                 signing_key: SigningKey | None = None, security: KafkaSecurity | None = None,
                 owner: str | None = None) -> None:
        from kafka import KafkaProducer

        self.owner = owner or store.current_owner()  # the run this emitter drives plans for
        self.claimant = store.new_claimant(self.owner)  # this emitter, in plan_steps.claimed_by
        self.bootstrap = bootstrap
        self.db_url = db_url
        self.send_timeout_s = send_timeout_s
        self.signing_key = signing_key
        if signing_key is None:
            log.warning("control steps are sent UNSIGNED: a job configured with control keys rejects them "
                        "(set the ballast_control_signing connection or BALLAST_CONTROL_SIGNING_KEY)")
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                acks="all",
                enable_idempotence=True,
                linger_ms=0,
                max_block_ms=15000,
                request_timeout_ms=10000,
                bootstrap_timeout_ms=int(BOOTSTRAP_TIMEOUT_S * 1000),  # kafka-python 3.0's api_version_auto_timeout_ms
                **client_kwargs(security),
            )
        except Exception as exc:  # NoBrokersAvailable and friends
            raise EmitError(
                f"cannot reach the Kafka broker at {bootstrap} ({exc}); check the `ballast_kafka` "
                "connection or BALLAST_KAFKA_BOOTSTRAP, and that the broker is up (make up)"
            ) from exc
        self._checked_topics: set[str] = set()

    def __enter__(self) -> ControlEmitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._producer.close(timeout=10)

    # ------------------------------------------------------------------------------- sending

    def _check_topic(self, topic: str) -> None:
        if topic in self._checked_topics:
            return
        from kafka.errors import KafkaTimeoutError

        try:
            parts = self._producer.partitions_for(topic)
        except KafkaTimeoutError:
            parts = None
        if not parts:
            raise EmitError(
                f"control topic {topic!r} does not exist on {self.bootstrap}; the broker does not "
                "auto-create topics. Launch the job with the ballast_supervise DAG (it creates the "
                "control topics) or create it with 1 partition"
            )
        self._checked_topics.add(topic)

    def send(self, step: ControlStep) -> tuple[int, int]:
        """One step to its job's control topic, signed when the emitter has a key; the record's
        (partition, offset). Plans go through `emit` (it claims and records every step); `send`
        alone serves callers that keep no plan in the metrics DB (the benchmarks)."""
        topic = control_topic(step.job)
        self._check_topic(topic)
        try:
            future = self._producer.send(topic, key=message_key(step.job, step.operator),
                                         value=signed_step(step, self.signing_key))
            md = future.get(timeout=self.send_timeout_s)
        except Exception as exc:
            raise EmitError(
                f"step {step.step}/{step.steps} of plan {step.plan_id} was not acknowledged by the "
                f"broker ({exc}); nothing was recorded as emitted, so re-running the task retries it",
                transient=True,
            ) from exc
        return md.partition, md.offset

    def _emit_one(self, rec: store.StepRecord, effective_at: datetime, now: datetime) -> EmittedStep | None:
        try:
            msg = parse_control(_json(rec.payload))
        except ValueError as exc:
            raise EmitError(f"stored step {rec.step} of plan {rec.plan_id} is malformed: {exc}") from exc
        msg = dataclasses.replace(msg, issued_at=now, effective_at=effective_at)
        if not store.claim_step_emission(self.db_url, rec.plan_id, rec.step, msg.to_dict(), effective_at,
                                        claimant=self.claimant):
            log.info("step %s of plan %s is claimed or emitted by another emitter; not sending", rec.step,
                     rec.plan_id)
            return None
        try:
            partition, offset = self.send(msg)
        except EmitError:
            store.release_step_claim(self.db_url, rec.plan_id, rec.step, self.claimant)
            raise
        store.mark_step_emitted(self.db_url, rec.plan_id, rec.step, datetime.now(UTC), partition, offset)
        log.info("emitted step %d/%d of plan %s: %d move(s), workers after %d, expects map v%d, "
                 "effective at %s -> %s[%d]@%d", msg.step, msg.steps, msg.plan_id, len(msg.moves), msg.workers,
                 msg.map_version, effective_at.isoformat(), control_topic(msg.job), partition, offset)
        return EmittedStep(rec.step, partition, offset, effective_at)

    # ------------------------------------------------------------------------------- modes

    def emit(self, plan_id: str, mode: EmitMode = "flow-control", gap_s: float | None = None,
             now: datetime | None = None) -> EmitOutcome:
        """Send what may be sent now (see module doc); safe to call any number of times."""
        if mode not in EMIT_MODES:
            raise EmitError(f"unknown emit mode {mode!r}; use one of {EMIT_MODES}")
        plan = store.get_plan(self.db_url, plan_id)
        if plan is None:
            raise EmitError(f"plan {plan_id} is not in the metrics DB at {self.db_url}")
        if not plan.is_open:
            raise EmitError(f"plan {plan_id} is already {plan.status}; plan a new migration instead")
        if plan.status == "awaiting_approval":
            raise EmitError(f"plan {plan_id} awaits approval; it is emitted once a person approves it")
        if plan.owner and plan.owner != self.owner:
            if not plan.owner.startswith("cli:") and plan.owner_alive():
                raise EmitError(f"plan {plan_id} is driven by {plan.owner}, not by this run ({self.owner}); "
                                + store.what_to_do(plan))
            # a shell's plan, or a gone run's: an emitter started on this very plan id is the
            # explicit takeover (recorded); the step claims still keep every step sent once
            taken = store.take_over_plan(self.db_url, plan_id, self.owner, force=True)
            store.add_event(self.db_url, plan.job, plan.operator, "warning", "plan_taken_over",
                           f"plan {plan_id} taken over from {plan.owner} by {self.owner}, whose emitter was "
                           "started on it", details={"plan_id": plan_id})
            log.warning("plan %s: taken over from %s by %s", plan_id, plan.owner, taken.owner)
        store.touch_owner(self.db_url, plan_id)
        gap = float(plan.params.get("gap_seconds", 0.0) if gap_s is None else gap_s)
        steps = store.plan_steps(self.db_url, plan_id)
        cps = store.checkpoints(self.db_url, plan_id)
        now = now or datetime.now(UTC)
        out = EmitOutcome(plan_id)
        if plan.status == "planned":
            store.set_plan_status(self.db_url, plan_id, "emitting")

        # a rejected or superseded step stops the plan, whatever the mode
        for k in sorted(cps):
            if cps[k].status != "applied":
                out.failed_step = k
                out.failed_reason = f"step {k} {cps[k].status}: {cps[k].reason or 'no reason given'}"
                out.already_emitted = [s.step for s in steps if s.emitted]
                return out

        if mode == "flow-control":
            prev_done: datetime | None = None
            for rec in steps:
                cp = cps.get(rec.step)
                if rec.emitted:
                    out.already_emitted.append(rec.step)
                    if cp is None:
                        out.waiting_for.append(rec.step)
                        break
                    prev_done = cp.completed_at
                    continue
                eff = max(now, prev_done + timedelta(seconds=gap)) if prev_done else now
                sent = self._emit_one(rec, eff, now)
                if sent:
                    out.emitted.append(sent)
                out.waiting_for.append(rec.step)
                break
        else:
            pending = [r for r in steps if not r.emitted]
            out.already_emitted = [r.step for r in steps if r.emitted]
            for i, rec in enumerate(pending):
                sent = self._emit_one(rec, now + timedelta(seconds=gap * i), now)
                if not sent:
                    # another emitter is sending this step: it sends the next ones after it, in
                    # order; sending them from here could put step k+1 on the topic before step k
                    break
                out.emitted.append(sent)
            out.waiting_for = [r.step for r in steps if r.step not in cps]
        self._producer.flush(timeout=self.send_timeout_s)
        emitted_now = {e.step for e in out.emitted} | set(out.already_emitted)
        out.all_emitted = emitted_now >= {r.step for r in steps}
        return out


def _json(payload: dict) -> bytes:
    import json

    return json.dumps(payload).encode()
