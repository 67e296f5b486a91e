"""A live bin merge on a real job, the inverse of a split: parts that do not share a worker are
moved together first, then 16 -> 4 bins with no key moved, then a restart with the original `--bins`
— state and outputs stay exact; and a window processor merges with timers pending, every window
firing once."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ballast.bin_maps import merge_assignment
from ballast.policy import apply_moves, merge_plan
from ballast.protocol import Move
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.control import live_step, send_control
from tests.helpers.dp_helpers import (
    check_exact,
    check_migration_property,
    checkpoints,
    consumed_rows,
    zipf_keys,
)
from tests.helpers.logs import ballast_log_lines
from tests.helpers.wait import wait_until
from tests.helpers.window_helpers import WindowJob

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS, MERGE_TO = 16, 4
HALF = 20_000


_step = live_step


def test_parts_moved_together_then_merged_then_restarted_keep_state_exact(spark, kafka_bootstrap, make_topics,
                                                                         unique_name, tmp_path, db_url,
                                                                         produce_with_spark):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    keys = zipf_keys(2 * HALF, 4_000, seed=13, s=1.1)
    produce_with_spark(topic, keys[:HALF])
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=100, max_offsets_per_trigger=5000)
    ckpt = cfg.checkpoint_dir + "/spark"
    runner = start_job(spark, cfg)

    def alive() -> None:
        if runner.query.exception() is not None:
            raise AssertionError(f"query failed: {runner.query.exception()}")

    with ballast_log_lines() as lines:
        try:
            wait_until(lambda: (runner.last_epoch or 0) >= 2, 180, "a few epochs at 16 bins", check=alive)
            # parts of the later merged bins apart: bin 1 to worker 1, bin 14 to worker 0
            apart = _step(job, "apart", 0, kind="moves", moves=(Move(1, 0, 1), Move(14, 1, 0)))
            send_control(kafka_bootstrap, job, [apart.to_json()])
            wait_until(lambda: ("apart", 1) in checkpoints(db_url, job), 120, "the moves' checkpoint", check=alive)
            wait_until(lambda: consumed_rows(ckpt, topic) == HALF, 300, "the first half consumed", check=alive)
            st = runner._state
            assert st is not None and st.map_version == 1
            refused = _step(job, "early", 1, kind="merge", bins=MERGE_TO)
            send_control(kafka_bootstrap, job, [refused.to_json()])
            wait_until(lambda: ("early", 1) in checkpoints(db_url, job), 120, "the refusal", check=alive)
            plan = merge_plan(1, st.assignment, 2, MERGE_TO)
            assert [s.kind for s in plan.steps] == ["moves", "merge"]
            msgs = [_step(job, "merge", s.map_version, step=s.step, steps=len(plan.steps), kind=s.kind,
                          moves=s.moves, bins=s.merge_to) for s in plan.steps]
            send_control(kafka_bootstrap, job, [x.to_json() for x in msgs])
            wait_until(lambda: ("merge", 2) in checkpoints(db_url, job), 120, "the merge's checkpoint", check=alive)
        finally:
            runner.stop()
    produce_with_spark(topic, keys[HALF:])
    runner = start_job(spark, cfg)  # the original --bins 16: the map (4 bins) comes from the journal
    try:
        wait_until(lambda: consumed_rows(ckpt, topic) == 2 * HALF, 300, "all input consumed after the restart",
                   check=alive)
    finally:
        runner.stop()

    cps = checkpoints(db_url, job)
    early = cps[("early", 1)]
    assert early.status == "rejected" and "parts share a worker" in early.reason, early.reason
    assert cps[("merge", 1)].status == "applied" and cps[("merge", 1)].keys_moved > 0
    merged = cps[("merge", 2)]
    assert merged.status == "applied" and (merged.bins_moved, merged.keys_moved) == (0, 0), "a merge moves no key"
    final = merge_assignment(apply_moves(st.assignment, list(plan.steps[0].moves)), MERGE_TO)
    with session_scope(db_url) as s:
        latest = s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job)
                           .order_by(m.RoutingMap.map_version.desc())).first()
        bins_seen = set(s.scalars(select(m.BinMetrics.bin).where(m.BinMetrics.job == job,
                                                                  m.BinMetrics.epoch > merged.applied_epoch)))
    assert latest.map_version == 3 and latest.assignment == final
    assert bins_seen and bins_seen <= set(range(MERGE_TO)), "after the merge, metrics come per merged bin"
    assert check_migration_property(db_url, job) > 0

    check_exact(kafka_bootstrap, topic, ckpt, job, cfg.state_location, 2, final, MERGE_TO)
    assert any(f"merged {BINS} -> {MERGE_TO} bins" in ln for ln in lines), [ln for ln in lines if "epoch" in ln][:20]


def test_a_window_processor_merges_with_timers_pending_and_every_window_fires_once(spark, kafka_bootstrap,
                                                                                   make_topics, unique_name,
                                                                                   tmp_path, db_url):
    """Event-time windows at 64 bins with timers pending at the merge to 8: the merge's epoch files
    each part's timers under the merged bin, and every (user, window) is emitted exactly once."""
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, 64, seed=19)
    job, op = w.job, w.OPERATOR
    try:
        wait_until(lambda: (w.runner.last_epoch or 0) >= 2, 180, "a few epochs at 64 bins", check=w.alive)
        send_control(kafka_bootstrap, job, [_step(job, "merge", 0, kind="merge", bins=8, operator=op).to_json()],
                     operator=op)
        wait_until(lambda: ("merge", 1) in checkpoints(db_url, job), 120, "the merge's checkpoint", check=w.alive)
        assert w.runner._state is not None and len(w.runner._state.assignment) == 8
        w.finish()
    finally:
        w.runner.stop()
    assert checkpoints(db_url, job)[("merge", 1)].status == "applied"
    w.check()
