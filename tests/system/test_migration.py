"""Correctness + migration property under a live 8-step plan that changes W 2→3→2 (in-process job)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import (
    check_migration_property,
    check_state,
    checkpoints,
    outputs_as_set,
    plan_maps,
    reference_by_epoch,
    steps_from_maps,
    zipf_keys,
)
from tests.helpers.logs import ballast_log_lines
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS = 64
N_RECORDS = 200_000
N_KEYS = 50_000


def test_live_plan_keeps_state_and_outputs_exact(spark, kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                 db_url, produce_with_spark):
    with ballast_log_lines() as lines:
        _run_live_plan(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, produce_with_spark, lines)


def _run_live_plan(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, produce_with_spark,  # type: ignore[no-untyped-def]
                   lines: list[str]) -> None:
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    keys = zipf_keys(N_RECORDS, N_KEYS, seed=3)
    produce_with_spark(topic, keys)
    maps = plan_maps(BINS)
    steps = steps_from_maps(job, "keycount", "plan-live", BINS, maps)
    assert len(steps) >= 8
    moved_bins = {mv.bin for s in steps for mv in s.moves}
    assert len(moved_bins) >= BINS // 2
    assert [s.workers for s in steps][:1] == [3] and steps[-1].workers == 2

    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=100, max_offsets_per_trigger=8000)
    runner = start_job(spark, cfg)

    def alive() -> None:
        if runner.query.exception() is not None:
            raise AssertionError(f"query failed: {runner.query.exception()}")

    try:
        # a controller with flow control: the next step after the previous checkpoint and one more epoch
        sent_at_epoch = -10
        for i, step in enumerate(steps):
            wait_until(lambda: runner.last_epoch is not None and runner.last_epoch >= sent_at_epoch + 1,
                       180, f"epochs before step {i + 1}", poll=0.2, check=alive)
            send_control(kafka_bootstrap, job, [step.to_json()])
            wait_until(lambda: (step.plan_id, step.step) in checkpoints(db_url, job), 120,
                       f"checkpoint of step {i + 1}", poll=0.2, check=alive)
            sent_at_epoch = runner.last_epoch or 0
        ckpt = cfg.checkpoint_dir + "/spark"

        def consumed_all() -> bool:
            eps = committed_epochs(ckpt)
            end = read_end_offsets(ckpt, eps[-1]) if eps else None
            return bool(end) and sum(end.get(topic, {}).values()) == N_RECORDS

        wait_until(consumed_all, 600, "all input consumed", check=alive)
    finally:
        runner.stop()

    cps = checkpoints(db_url, job)
    assert sorted(cps) == [("plan-live", i + 1) for i in range(len(steps))]
    applied_epochs = []
    for i, step in enumerate(steps):
        c = cps[("plan-live", step.step)]
        assert c.status == "applied", (c.status, c.reason)
        assert c.map_version_after == i + 1
        assert c.bins_moved == len(step.moves)
        applied_epochs.append(c.applied_epoch)
    assert applied_epochs == sorted(set(applied_epochs)), "one step per epoch, in order"
    assert sum(c.keys_moved for c in cps.values()) > 0 and sum(c.bytes_moved for c in cps.values()) > 0

    with session_scope(db_url) as s:
        latest = s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job)
                           .order_by(m.RoutingMap.map_version.desc())).first()
        total_in = s.scalar(select(func.sum(m.EpochMetrics.input_rows)).where(m.EpochMetrics.job == job))
        bin_records = s.scalar(select(func.sum(m.BinMetrics.records)).where(m.BinMetrics.job == job))
        wm = s.scalar(select(func.sum(m.WorkerMetrics.records_in)).where(m.WorkerMetrics.job == job))
        w3 = s.scalar(select(func.count()).select_from(m.WorkerMetrics)
                      .where(m.WorkerMetrics.job == job, m.WorkerMetrics.worker == 2, m.WorkerMetrics.records_in > 0))
        hb = s.get(m.Heartbeat, (job, "keycount"))
    assert latest.map_version == len(steps) and latest.workers == 2 and latest.assignment == maps[-1][1]
    assert total_in == N_RECORDS and bin_records == N_RECORDS and wm == N_RECORDS
    assert w3 > 0, "worker 2 applied records while it existed"
    assert hb is not None and hb.status == "stopped"

    checked = check_migration_property(db_url, job)
    assert checked > 0

    epochs = committed_epochs(ckpt)
    ref_counts, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, ckpt, epochs)
    assert len(ref_counts) == N_KEYS
    outs, dups = read_output(kafka_bootstrap, f"{job}.output")
    got = outputs_as_set(outs)
    assert len(got) == len(outs), "one output per (epoch, key)"
    assert got == ref_outputs, f"{len(got ^ ref_outputs)} outputs differ from the reference"
    check_state(cfg.state_location, 3, maps[-1][1], BINS, ref_counts)
    assert any(ln.startswith("epoch") and "apply=plan-live#1" in ln for ln in lines), "operator log per epoch"
    # the warm-up ran the epoch's plan before the first batch (its synthetic row would be key b"{}":
    # check_state below finds no such key, so it applied nothing)
    assert any(ln.startswith("warmed Spark's epoch plan") for ln in lines), lines[:20]
    assert not any("warm-up failed" in ln for ln in lines), [ln for ln in lines if "warm-up" in ln]
