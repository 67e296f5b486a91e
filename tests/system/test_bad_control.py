"""Bad control input is recorded and answered; the job keeps running and its state is untouched."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from ballast.protocol import ControlStep, Move, acks_topic
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import uniform_assignment
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import check_state, checkpoints, future, read_json_topic, reference_by_epoch, zipf_keys
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS = 16


def _step(job: str, plan: str, moves: list[tuple[int, int, int]], version: int, workers: int = 2,
          effective_at: datetime | None = None, step: int = 1, steps: int = 1, operator: str = "keycount") -> bytes:
    now = datetime.now(UTC)
    return ControlStep(job=job, operator=operator, plan_id=plan, step=step, steps=steps,
                       kind="moves" if moves else "noop",
                       moves=tuple(Move(*mv) for mv in moves), workers=workers, map_version=version,
                       issued_at=now, effective_at=effective_at or now).to_json()


def _events(db_url: str, job: str) -> list[m.Event]:
    with session_scope(db_url) as s:
        return list(s.scalars(select(m.Event).where(m.Event.job == job)))


def _decisions(db_url: str, job: str) -> list[m.StepDecision]:
    with session_scope(db_url) as s:
        return list(s.scalars(select(m.StepDecision).where(m.StepDecision.job == job)))


def test_bad_control_input_is_rejected_and_job_keeps_running(spark, kafka_bootstrap, make_topics, unique_name,
                                                             tmp_path, db_url, produce_with_spark):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    keys = zipf_keys(20_000, 2_000, seed=9)
    produce_with_spark(topic, keys[:10_000])
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=100, max_offsets_per_trigger=4000)
    runner = start_job(spark, cfg)

    def alive() -> None:
        assert runner.query.exception() is None, runner.query.exception()

    def cp(plan: str, step: int = 1):  # type: ignore[no-untyped-def]
        return wait_until(lambda: checkpoints(db_url, job).get((plan, step)), 90, f"checkpoint {plan}#{step}",
                          poll=0.2, check=alive)

    try:
        # malformed and foreign messages: Event row + ack, no checkpoint row
        send_control(kafka_bootstrap, job, [b"{not json"])
        wait_until(lambda: len(_events(db_url, job)) >= 1, 90, "event for malformed", check=alive)
        send_control(kafka_bootstrap, job, [_step("other-job", "foreign", [(0, 0, 1)], 0)])
        wait_until(lambda: len(_events(db_url, job)) >= 2, 90, "event for foreign", check=alive)
        send_control(kafka_bootstrap, job, [_step(job, "foreign-op", [(0, 0, 1)], 0, operator="wordcount")])
        wait_until(lambda: len(_events(db_url, job)) >= 3, 90, "event for wrong operator", check=alive)
        ev = sorted(e.message for e in _events(db_url, job))
        assert any("malformed" in e and "not JSON" in e for e in ev), ev
        assert any("other-job/keycount" in e for e in ev) and any("/wordcount" in e for e in ev), ev

        # shape is fine, the job's state says no: rejected with a reason, never half-applied
        bad = {
            "bad-bin": (_step(job, "bad-bin", [(1, 0, 1), (BINS + 3, 0, 1)], 0), "unknown bin"),
            "bad-ver": (_step(job, "bad-ver", [(1, 0, 1)], 7), "map version mismatch"),
            "bad-src": (_step(job, "bad-src", [(1, 0, 1), (BINS - 1, 0, 1)], 0), "wrong source worker"),
            "bad-dst": (_step(job, "bad-dst", [(1, 0, 5)], 0), "workers must be <"),
            "bad-w": (_step(job, "bad-w", [(1, 0, 1)], 0, workers=1), "would sit on worker"),
            "bad-far": (_step(job, "bad-far", [(1, 0, 1)], 0, effective_at=future(10 * 86400)), "in the future"),
        }
        for plan, (msg, why) in bad.items():
            send_control(kafka_bootstrap, job, [msg])
            c = cp(plan)
            assert c.status == "rejected" and why in c.reason, (plan, c.reason)
            assert c.applied_epoch is None and c.map_version_after is None
        with session_scope(db_url) as s:
            versions = [r.map_version for r in s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job))]
        assert versions == [0], "rejected steps changed the map"

        # a good step, then its duplicate: one checkpoint row, the ack is re-echoed
        send_control(kafka_bootstrap, job, [_step(job, "good", [(0, 0, 1)], 0, steps=2)])
        c1 = cp("good")
        assert c1.status == "applied" and c1.map_version_after == 1 and c1.bins_moved == 1
        send_control(kafka_bootstrap, job, [_step(job, "good", [(0, 0, 1)], 0, steps=2)])
        wait_until(lambda: any(d.action == "duplicate" and d.plan_id == "good" for d in _decisions(db_url, job)),
                   90, "duplicate decision", check=alive)

        # a step due in a few seconds is queued, then applied without any input flowing (ticker)
        produce_with_spark(topic, keys[10_000:])
        send_control(kafka_bootstrap, job,
                     [_step(job, "good", [(1, 0, 1)], 1, step=2, steps=2, effective_at=future(4))])
        wait_until(lambda: any(d.action == "queue" and d.plan_id == "good" and d.step == 2
                               for d in _decisions(db_url, job)), 90, "queue decision", check=alive)
        c2 = cp("good", 2)
        assert c2.status == "applied" and c2.map_version_after == 2
        assert c2.applied_at >= c2.completed_at.replace(microsecond=0) or c2.applied_at is not None

        # a queued step of an older plan is superseded by a newer plan
        send_control(kafka_bootstrap, job, [_step(job, "old", [(2, 0, 1)], 2, effective_at=future(3600))])
        wait_until(lambda: any(d.action == "queue" and d.plan_id == "old" for d in _decisions(db_url, job)),
                   90, "old plan queued", check=alive)
        send_control(kafka_bootstrap, job, [_step(job, "new", [(2, 0, 1)], 2)])
        assert cp("new").status == "applied"
        old = cp("old")
        assert old.status == "superseded" and "new" in old.reason

        ckpt = cfg.checkpoint_dir + "/spark"
        wait_until(lambda: (e := committed_epochs(ckpt)) and sum(read_end_offsets(ckpt, e[-1]).get(topic, {}).values())
                   == len(keys), 240, "all input consumed", check=alive)
    finally:
        runner.stop()

    cps = checkpoints(db_url, job)
    assert set(cps) == {(p, 1) for p in bad} | {("good", 1), ("good", 2), ("old", 1), ("new", 1)}
    acks = read_json_topic(kafka_bootstrap, acks_topic(job))
    assert any(a["plan_id"] == "" and a["status"] == "rejected" and "malformed" in a["reason"] for a in acks)
    assert any(a["plan_id"] == "foreign" and a["job"] == "other-job" for a in acks)
    assert any(a["plan_id"] == "good" and a["step"] == 1 and a["extra"].get("duplicate") for a in acks)
    for plan in bad:
        assert any(a["plan_id"] == plan and a["status"] == "rejected" for a in acks), plan

    final = uniform_assignment(BINS, 2)
    final[0] = final[1] = final[2] = 1
    ref, _ = reference_by_epoch(kafka_bootstrap, topic, ckpt, committed_epochs(ckpt))
    assert sum(ref.values()) == len(keys)
    check_state(cfg.state_location, 2, final, BINS, ref)
