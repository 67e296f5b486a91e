"""A live bin split on a real job: 8 -> 64 bins with no key moved, a part of the hot bin moved
alone afterwards, then a restart with the original `--bins` — state and outputs stay exact."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import select

from ballast.bin_maps import split_assignment
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

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS, SPLIT_TO = 8, 64
HALF = 30_000


_step = live_step


def test_split_then_move_a_part_then_restart_keeps_state_exact(spark, kafka_bootstrap, make_topics, unique_name,
                                                                tmp_path, db_url, produce_with_spark):
    with ballast_log_lines() as lines:
        _split_move_restart(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, produce_with_spark,
                            lines)


def _split_move_restart(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url,  # type: ignore[no-untyped-def]
                        produce_with_spark, lines: list[str]) -> None:
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    keys = zipf_keys(2 * HALF, 5_000, seed=11, s=1.3)  # a hot key: zipf's rank 1
    produce_with_spark(topic, keys[:HALF])
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=100, max_offsets_per_trigger=6000)
    ckpt = cfg.checkpoint_dir + "/spark"

    def consumed(n: int) -> bool:
        return consumed_rows(ckpt, topic) == n

    runner = start_job(spark, cfg)

    def alive() -> None:
        if runner.query.exception() is not None:
            raise AssertionError(f"query failed: {runner.query.exception()}")

    split = _step(job, "split", 0, kind="split", bins=SPLIT_TO)
    try:
        wait_until(lambda: (runner.last_epoch or 0) >= 2, 180, "a few epochs at 8 bins", check=alive)
        send_control(kafka_bootstrap, job, [split.to_json()])
        wait_until(lambda: ("split", 1) in checkpoints(db_url, job), 120, "the split's checkpoint", check=alive)
        wait_until(lambda: consumed(HALF), 300, "the first half consumed", check=alive)
        # the parts of bin 0 (worker 0) that do not hold the hottest key move to worker 1, alone
        hot = Counter(keys).most_common(1)[0][0]
        hot_part = next(r.b for r in spark.createDataFrame([(hot,)], "key binary").selectExpr(
            f"cast(shiftrightunsigned(xxhash64(key), {64 - (SPLIT_TO.bit_length() - 1)}) as int) as b").collect())
        parent = hot_part >> 3
        parts = [p for p in range(parent << 3, (parent + 1) << 3) if p != hot_part]
        owner = runner._state.assignment[hot_part]  # type: ignore[union-attr]
        move = _step(job, "part", 1, kind="moves", moves=tuple(Move(p, owner, 1 - owner) for p in parts))
        send_control(kafka_bootstrap, job, [move.to_json()])
        wait_until(lambda: ("part", 1) in checkpoints(db_url, job), 120, "the move's checkpoint", check=alive)
    finally:
        runner.stop()
    produce_with_spark(topic, keys[HALF:])
    runner = start_job(spark, cfg)  # the original --bins 8: the map (64 bins) comes from the journal
    try:
        wait_until(lambda: consumed(2 * HALF), 300, "all input consumed after the restart", check=alive)
    finally:
        runner.stop()

    cps = checkpoints(db_url, job)
    assert cps[("split", 1)].status == "applied" and cps[("split", 1)].bins_moved == 0
    assert cps[("split", 1)].keys_moved == 0, "a split moves no key"
    assert cps[("part", 1)].status == "applied", cps[("part", 1)].reason
    assert cps[("part", 1)].bins_moved == len(parts) and cps[("part", 1)].keys_moved > 0
    final = split_assignment([b * 2 // BINS for b in range(BINS)], SPLIT_TO)
    for p in parts:
        final[p] = 1 - owner
    with session_scope(db_url) as s:
        latest = s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job)
                           .order_by(m.RoutingMap.map_version.desc())).first()
        job_row = s.scalars(select(m.Job).where(m.Job.job == job)).one()
    assert latest.map_version == 2 and latest.assignment == final
    assert job_row.bins == BINS, "the job's first bin count stays its identity; the map carries today's"
    assert check_migration_property(db_url, job) > 0

    check_exact(kafka_bootstrap, topic, ckpt, job, cfg.state_location, 2, final, SPLIT_TO)
    assert any(f"split {BINS} -> {SPLIT_TO} bins" in ln for ln in lines), [ln for ln in lines if "epoch" in ln][:20]


def test_a_window_processor_splits_with_timers_pending_and_every_window_fires_once(spark, kafka_bootstrap,
                                                                                   make_topics, unique_name,
                                                                                   tmp_path, db_url):
    """Event-time windows with timers pending at the split: the split's epoch files each timer under
    its own part, the cold parts of a bin then move to the other worker, and every (user, window)
    is still emitted exactly once."""
    from tests.helpers.window_helpers import WindowJob

    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=17)
    job, op = w.job, w.OPERATOR
    try:
        wait_until(lambda: (w.runner.last_epoch or 0) >= 2, 180, "a few epochs at 8 bins", check=w.alive)
        send_control(kafka_bootstrap, job, [_step(job, "split", 0, kind="split", bins=SPLIT_TO,
                                                  operator=op).to_json()], operator=op)
        wait_until(lambda: ("split", 1) in checkpoints(db_url, job), 120, "the split's checkpoint", check=w.alive)
        st = w.runner._state
        assert st is not None and len(st.assignment) == SPLIT_TO
        parts = [p for p in range(1, 8)]  # bin 0's parts but its first: their timers were filed under part 0
        owner = st.assignment[0]
        move = _step(job, "part", 1, kind="moves", moves=tuple(Move(p, owner, 1 - owner) for p in parts),
                     operator=op)
        send_control(kafka_bootstrap, job, [move.to_json()], operator=op)
        wait_until(lambda: ("part", 1) in checkpoints(db_url, job), 120, "the move's checkpoint", check=w.alive)
        w.finish()
    finally:
        w.runner.stop()
    cps = checkpoints(db_url, job)
    assert cps[("split", 1)].status == "applied" and cps[("part", 1)].status == "applied", cps[("part", 1)].reason
    assert cps[("part", 1)].keys_moved > 0, "the moved parts carried state (windows and their timers)"
    w.check()
