"""A settings step on a real job (real Kafka, Spark, SQLite): the trigger interval and the records
per epoch change live — the streaming query is restarted in the same driver on the same checkpoint,
the step gets its completion checkpoint like any other, the epochs after it read at most the new
cap and start the new interval apart, a driver restarted with its old command line keeps the new
settings (they are in the journal), and the key counts stay exactly once throughout. A settings
step that cannot apply (it would change W) is rejected whole before it, and nothing restarts."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from ballast.protocol import ControlStep, Settings
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.offsets import committed_epochs
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import (
    check_state,
    checkpoints,
    consumed_rows,
    outputs_as_set,
    reference_by_epoch,
    zipf_keys,
)
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS = 8
CAP = 400  # the new records per epoch
TRIGGER_MS = 1500  # the new interval: well above an epoch's own time here, so the gaps show it


def _settings_step(job: str, plan: str = "tune", **settings: int) -> ControlStep:
    now = datetime.now(UTC)
    return ControlStep(job=job, operator="keycount", plan_id=plan, step=1, steps=1, kind="settings", moves=(),
                       workers=2, map_version=0, issued_at=now, effective_at=now, settings=Settings(**settings))


def _epochs(db_url: str, job: str) -> list[m.EpochMetrics]:
    with session_scope(db_url) as s:
        rows = list(s.scalars(select(m.EpochMetrics).where(m.EpochMetrics.job == job).order_by(m.EpochMetrics.epoch)))
        s.expunge_all()
    return rows


def test_a_settings_step_changes_trigger_and_cap_live_and_a_restart_keeps_them(
        spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, produce_with_spark):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    keys = zipf_keys(9_000, 2_000, seed=5, s=1.1)
    first, second, third = keys[:4_000], keys[4_000:7_000], keys[7_000:]
    produce_with_spark(topic, first)
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=100, max_offsets_per_trigger=2_000)
    ckpt = cfg.checkpoint_dir + "/spark"

    def consumed(n: int) -> bool:
        return consumed_rows(ckpt, topic) == n

    runner = start_job(spark, cfg)

    def alive() -> None:
        if not runner.running and runner.query.exception() is not None:
            raise AssertionError(f"query failed: {runner.query.exception()}")

    try:
        wait_until(lambda: consumed(len(first)), 180, "the first part consumed at the configured cap", check=alive)
        # one that would change W is rejected whole: its checkpoint says why, the query runs on as it was
        bad = dataclasses.replace(_settings_step(job, "bad", trigger_ms=200), workers=3)
        send_control(kafka_bootstrap, job, [bad.to_json()])
        wait_until(lambda: ("bad", 1) in checkpoints(db_url, job), 120, "the rejected step's checkpoint", check=alive)
        cp = checkpoints(db_url, job)[("bad", 1)]
        assert cp.status == "rejected" and "keeps the worker count" in (cp.reason or ""), cp.reason
        assert runner.streaming is not None and runner.streaming.restarts == 0 and runner.query.isActive
        old_run, query_id = runner.query.runId, runner.query.id
        send_control(kafka_bootstrap, job, [_settings_step(job, trigger_ms=TRIGGER_MS, max_records_per_epoch=CAP)
                                            .to_json()])
        wait_until(lambda: ("tune", 1) in checkpoints(db_url, job), 120, "the settings step's checkpoint",
                   check=alive)
        wait_until(lambda: runner.streaming is not None and runner.streaming.restarts == 1
                   and not runner.streaming.replacing.is_set(), 120, "the query restarted", check=alive)
        assert runner.query.id == query_id and runner.query.runId != old_run, "same checkpoint, a new run of it"
        applied_at = checkpoints(db_url, job)[("tune", 1)].applied_epoch
        produce_with_spark(topic, second)
        wait_until(lambda: consumed(len(first) + len(second)), 240, "the second part consumed under the new cap",
                   check=alive)
        # the old query stopped once the settings epoch was committed: the new one did not run it again
        new_batches = sorted(int(p["batchId"]) for p in runner.query.recentProgress)
        assert new_batches and new_batches[0] > applied_at, (applied_at, new_batches[:5])
    finally:
        runner.stop()
    cp = checkpoints(db_url, job)[("tune", 1)]
    assert cp.status == "applied", cp.reason
    eps = _epochs(db_url, job)
    before = [e for e in eps if e.epoch <= applied_at and e.input_rows]
    after = [e for e in eps if e.epoch > applied_at + 1 and e.input_rows]  # +1: the epoch Spark had planned
    assert max(e.input_rows for e in before) > CAP, "the configured cap held before the step"
    assert len(after) >= len(second) // CAP and max(e.input_rows for e in after) <= CAP, \
        [(e.epoch, e.input_rows) for e in after]
    # Spark's trigger ticks at multiples of the interval (the new query's first epoch may start
    # sooner) and Ballast's start times add Spark's planning jitter: the gaps' mean is what it sets
    ticked = after[1:]
    gaps = [(b.started_at - a.started_at).total_seconds() for a, b in zip(ticked, ticked[1:], strict=False)]
    assert len(gaps) >= 4 and sum(gaps) / len(gaps) >= TRIGGER_MS / 1000 * 0.8, f"epochs start {gaps} s apart"
    assert all(e.map_version == 1 for e in after), "a settings step is one map version"

    # a new driver on the old command line (cap 2000, trigger 100 ms): the journal's settings hold
    produce_with_spark(topic, third)
    runner = start_job(spark, cfg)
    try:
        assert runner.streaming is not None and runner.streaming.effective is not None
        assert (runner.streaming.effective.trigger_ms, runner.streaming.effective.max_records_per_epoch) == \
            (TRIGGER_MS, CAP)
        wait_until(lambda: consumed(len(keys)), 240, "the third part consumed after a restart", check=alive)
    finally:
        runner.stop()
    last = [e for e in _epochs(db_url, job) if e.epoch > after[-1].epoch and e.input_rows]
    assert last and max(e.input_rows for e in last) <= CAP, [(e.epoch, e.input_rows) for e in last]

    ref_counts, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, ckpt, committed_epochs(ckpt))
    outs, _ = read_output(kafka_bootstrap, f"{job}.output")
    got = outputs_as_set(outs)
    assert len(got) == len(outs), "one output per (epoch, key): no epoch was applied twice across the restart"
    assert got == ref_outputs, f"{len(got ^ ref_outputs)} outputs differ from the reference"
    check_state(cfg.state_location, 2, [b * 2 // BINS for b in range(BINS)], BINS, ref_counts)

