"""Control steps for tests: a step built in one line (`control_step`), and records written as the
controller's emitter writes them (same topic, same key), so a test can send well-formed, hostile
or out-of-order steps straight to a job."""

from __future__ import annotations

from datetime import UTC, datetime

from kafka import KafkaProducer

from ballast.protocol import ControlStep, Move, control_topic, message_key

#: the issue and effective time of `control_step`'s steps unless a test gives its own
STEP_TIME = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def control_step(plan: str = "p", step: int = 1, steps: int = 1,
                 moves: tuple[tuple[int, int, int], ...] = ((0, 0, 1),), workers: int = 2, version: int = 0,
                 eff: datetime = STEP_TIME, job: str = "j", op: str = "keycount") -> ControlStep:
    """A moves step (a no-op without moves) of plan `plan`, issued at STEP_TIME, effective at `eff`."""
    return ControlStep(job=job, operator=op, plan_id=plan, step=step, steps=steps, kind="moves" if moves else "noop",
                       moves=tuple(Move(*m) for m in moves), workers=workers, map_version=version,
                       issued_at=STEP_TIME, effective_at=eff)


def live_step(job: str, plan: str, version: int, operator: str = "keycount", step: int = 1, steps: int = 1,
              **kw: object) -> ControlStep:
    """A step for a running job, issued and effective now (a no-op unless `kw` says: kind, moves,
    bins, settings, workers ...), expecting map `version`."""
    import dataclasses

    now = datetime.now(UTC)
    base = ControlStep(job=job, operator=operator, plan_id=plan, step=step, steps=steps, kind="noop", moves=(),
                       workers=2, map_version=version, issued_at=now, effective_at=now)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def send_control(bootstrap: str, job: str, payloads: list[bytes], operator: str = "keycount") -> None:
    """Each payload as one record on `<job>.control`, keyed like the emitter's; waits for each ack."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=20000)
    try:
        for v in payloads:
            p.send(control_topic(job), key=message_key(job, operator), value=v).get(timeout=30)
    finally:
        p.close()
