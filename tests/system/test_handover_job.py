"""Handover on a real job (docs/handover.md): a window processor's bins move at a window boundary
with no state moved. The job queues the step ("handover: ..."), routes the moved bins' rows to
both owners until the watermark passes the boundary, then applies it (map v1, the checkpoint
"applied" with 0 keys and 0 bytes moved; the new owner's task reports each bin moved in by
"handover"). Every (user, window) is emitted exactly once and equals a run without a migration,
for tumbling and for sliding windows. A processor that declares no windows gets its handover
refused, and runs on exactly."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ballast.protocol import Move
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import uniform_assignment
from tests.helpers.control import live_step, send_control
from tests.helpers.dp_helpers import check_migration_property, checkpoints, consumed_rows
from tests.helpers.handover import decisions, latest_map, moved_in
from tests.helpers.wait import wait_until
from tests.helpers.window_helpers import WindowJob

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SLIDING = HERE / "sliding_counts.py"
BINS, MOVED, PLAN = 16, 4, "handover"
WINDOW_MS, SLIDE_MS = 10_000, 5_000  # sliding_counts' windows


def sliding_reference(evs: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """Every (user, window start, count, total) of 10 s windows every 5 s: an event counts in each
    window k·5 000 <= start <= t < start + 10 000 (two), each window once, sorted."""
    acc: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for e in evs:
        t = e["ms"]
        for start in (t - t % SLIDE_MS - SLIDE_MS, t - t % SLIDE_MS):
            assert start <= t < start + WINDOW_MS
            a = acc[(e["user"], start)]
            a[0] += 1
            a[1] += e["amount"]
    return sorted((u, s, c, t) for (u, s), (c, t) in acc.items())


def _bins_to_move(db_url: str, job: str) -> list[int]:
    """MOVED of worker 0's bins (0..7 in the uniform map), those with the most records so far first."""
    on0 = [b for b, w in enumerate(uniform_assignment(BINS, 2)) if w == 0]
    records: dict[int, int] = dict.fromkeys(on0, 0)
    with session_scope(db_url) as s:
        for r in s.scalars(select(m.BinMetrics).where(m.BinMetrics.job == job)):
            if r.bin in records:
                records[r.bin] += r.records
    return sorted(sorted(on0, key=lambda b: (-records[b], b))[:MOVED])


def _run_handover(w: WindowJob, kafka_bootstrap: str, db_url: str) -> None:
    """After a few epochs, hand MOVED of worker 0's bins over to worker 1; wait for the step to
    apply, finish the input; check the step's figures, the final map and every window."""
    job, op = w.job, w.operator
    ckpt = w.cfg.checkpoint_dir + "/spark"
    try:
        wait_until(lambda: (w.runner.last_epoch or 0) >= 2, 180, "a few epochs at 16 bins", check=w.alive)
        bins = _bins_to_move(db_url, job)
        step = live_step(job, PLAN, 0, operator=op, kind="moves", moves=tuple(Move(b, 0, 1) for b in bins),
                         handover=True, reason="test handover")
        send_control(kafka_bootstrap, job, [step.to_json()], operator=op)

        def done() -> Any:
            return checkpoints(db_url, job).get((PLAN, 1))

        # the handover completes once the watermark passes its boundary: 15 s of event time after
        # the step at most (a window and the lateness), i.e. within the input unless the job had read
        # nearly all of it; then the flush record (finish) carries the watermark past it
        wait_until(lambda: done() is not None or consumed_rows(ckpt, w.topic) == len(w.evs), 300,
                   "the handover's checkpoint, or every event consumed", check=w.alive)
        reported = None
        cp = done()
        if cp is not None and cp.status == "applied":  # read now: retention may drop the epoch later
            reported = moved_in(w.cfg.state_location, cp.applied_epoch, 1)
        during_input = cp is not None
        w.finish()
        cp = wait_until(done, 120, "the handover's checkpoint after the flush", check=w.alive)
        assert cp.status == "applied", f"handover {cp.status}: {cp.reason}"
        if reported is None:
            reported = moved_in(w.cfg.state_location, cp.applied_epoch, 1)
        st = w.runner._state
        assert st is not None
        final_assignment = list(st.assignment)
    finally:
        w.runner.stop()

    # the decision log: queued ("handover: ...") at the epochs before the one that applied it
    ds = decisions(db_url, job, PLAN)
    queued = [d for d in ds if d.action == "queue"]
    applies = [d for d in ds if d.action == "apply"]
    assert any(d.reason.startswith("handover:") for d in queued), [(d.epoch, d.action, d.reason) for d in ds]
    assert [d.epoch for d in applies] == [cp.applied_epoch], [(d.epoch, d.action, d.reason) for d in ds]
    assert max(d.epoch for d in queued) < cp.applied_epoch
    # no state moved: the checkpoint's figures and the new owner's report of each bin
    assert (cp.bins_moved, cp.keys_moved, cp.bytes_moved) == (MOVED, 0, 0), \
        (cp.bins_moved, cp.keys_moved, cp.bytes_moved)
    assert cp.map_version_after == 1
    assert set(reported) == set(bins), f"worker 1 reported moved_in {reported} at epoch {cp.applied_epoch}"
    for b, info in reported.items():
        assert (info.get("mode"), int(info["keys"]), int(info["bytes"])) == ("handover", 0, 0), (b, info)
    # the final map: the moved bins on worker 1, every other bin where it was
    expected_map = list(uniform_assignment(BINS, 2))
    for b in bins:
        expected_map[b] = 1
    latest = latest_map(db_url, job)
    assert (latest.map_version, latest.epoch) == (1, cp.applied_epoch)
    assert list(latest.assignment) == expected_map == final_assignment
    w.check()
    # a fresh bin's rows are not the bin's metrics: every bin's records come from the map's worker
    assert check_migration_property(db_url, job) > 0
    print(f"handover of bins {bins}: queued at epochs {sorted({d.epoch for d in queued})}, applied at "
          f"{cp.applied_epoch}{'' if during_input else ' (after the flush)'}")


def test_tumbling_windows_hand_over_with_no_state_moved_and_every_window_once(spark, kafka_bootstrap, make_topics,
                                                                               unique_name, tmp_path, db_url):
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=23,
                  operator="sliding_counts:TumblingCounts", py_files=[SLIDING])
    _run_handover(w, kafka_bootstrap, db_url)


def test_sliding_windows_hand_over_with_rows_to_both_owners_and_every_window_once(spark, kafka_bootstrap,
                                                                                   make_topics, unique_name,
                                                                                   tmp_path, db_url):
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=29,
                  operator="sliding_counts:SlidingCounts", py_files=[SLIDING], ref=sliding_reference)
    _run_handover(w, kafka_bootstrap, db_url)


def test_a_handover_of_a_processor_without_windows_is_refused_and_the_job_runs_on_exactly(spark, kafka_bootstrap,
                                                                                          make_topics, unique_name,
                                                                                          tmp_path, db_url):
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=31)
    job, op = w.job, w.operator
    try:
        wait_until(lambda: (w.runner.last_epoch or 0) >= 2, 180, "a few epochs at 16 bins", check=w.alive)
        step = live_step(job, PLAN, 0, operator=op, kind="moves", moves=tuple(Move(b, 0, 1) for b in range(MOVED)),
                         handover=True, reason="test handover")
        send_control(kafka_bootstrap, job, [step.to_json()], operator=op)
        cp = wait_until(lambda: checkpoints(db_url, job).get((PLAN, 1)), 120, "the refusal", check=w.alive)
        w.finish()
        st = w.runner._state
        assert st is not None and st.map_version == 0 and list(st.assignment) == uniform_assignment(BINS, 2)
    finally:
        w.runner.stop()
    assert cp.status == "rejected" and "window" in cp.reason, (cp.status, cp.reason)
    assert (cp.bins_moved, cp.keys_moved, cp.bytes_moved) == (0, 0, 0)
    assert latest_map(db_url, job).map_version == 0
    w.check()
