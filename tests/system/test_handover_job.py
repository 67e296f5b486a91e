"""Handover on a real job (docs/handover.md): a window processor's bins move at a window boundary
with no state moved. The job queues the step ("handover: ..."), routes the moved bins' rows to
both owners until the watermark passes the boundary, then applies it (map v1, the checkpoint
"applied" with 0 keys and 0 bytes moved; the new owner's task reports each bin moved in by
"handover"). Every (user, window) is emitted exactly once and equals a run without a migration,
for tumbling, sliding and staggered sliding windows (each user's grid shifted by its phase, which the
routing computes in the JVM to send each copy of a row only where its owner uses it). A processor
that declares no windows gets its handover refused, and runs on exactly."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ballast.policy.handover import WindowSpec
from ballast.protocol import Move
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import uniform_assignment
from tests.helpers.control import live_step, send_control
from tests.helpers.dp_helpers import checkpoints
from tests.helpers.handover import check_applied, latest_map, run_handover
from tests.helpers.wait import wait_until
from tests.helpers.window_helpers import WindowJob

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SLIDING = HERE / "sliding_counts.py"
BINS, MOVED, PLAN = 16, 4, "handover"
WINDOW_MS, SLIDE_MS = 10_000, 5_000  # sliding_counts' windows


def _reference(evs: list[dict[str, Any]], starts: Any) -> list[tuple[str, int, int, int]]:
    """Every (user, window start, count, total), each window once, sorted; `starts(user, t)`: the
    starts of the user's windows that contain event time t."""
    acc: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for e in evs:
        t = e["ms"]
        for start in starts(e["user"], t):
            assert start <= t < start + WINDOW_MS
            a = acc[(e["user"], start)]
            a[0] += 1
            a[1] += e["amount"]
    return sorted((u, s, c, t) for (u, s), (c, t) in acc.items())


def _sliding_starts(t: int) -> tuple[int, int]:
    """10 s windows every 5 s: an event counts in each window k·5 000 <= start <= t < start + 10 000 (two)."""
    return t - t % SLIDE_MS - SLIDE_MS, t - t % SLIDE_MS


def sliding_reference(evs: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """The sliding windows' reference (`_sliding_starts`)."""
    return _reference(evs, lambda _user, t: _sliding_starts(t))


def staggered_reference(evs: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """`sliding_reference` on each user's own grid: shifted by the framework's phase of the user."""
    stagger = WindowSpec(WINDOW_MS, SLIDE_MS, staggered=True)

    def starts(user: str, t: int) -> list[int]:
        phase = stagger.phase_of((user,))
        return [s + phase for s in _sliding_starts(t - phase)]

    return _reference(evs, starts)


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
    apply, finish the input; check the step's figures, the final map and every window. The handover
    completes once the watermark passes its boundary: 15 s of event time after the step at most (a
    window and the lateness), i.e. within the input unless the job had read nearly all of it; then
    the flush record carries the watermark past it."""
    r = run_handover(w, kafka_bootstrap, db_url, PLAN, lambda: _bins_to_move(db_url, w.job), "test handover")
    # the decision log: queued ("handover: ...") at the epochs before the one that applied it
    assert any(d.reason.startswith("handover:") for d in r.queued), [(d.epoch, d.reason) for d in r.queued]
    check_applied(db_url, w, r, PLAN, BINS)
    print(f"handover of bins {r.bins}: queued at epochs {sorted({d.epoch for d in r.queued})}, applied at "
          f"{r.cp.applied_epoch}{'' if r.during_input else ' (after the flush)'}")


WARMED = "warmed the handover's routing"  # spark_jobs.warmup: the fan-out analysed before the query starts


def test_tumbling_windows_hand_over_with_no_state_moved_and_every_window_once(spark, kafka_bootstrap, make_topics,
                                                                               unique_name, tmp_path, db_url, caplog):
    caplog.set_level(logging.INFO, logger="ballast.runner")
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=23,
                  operator="sliding_counts:TumblingCounts", py_files=[SLIDING])
    assert any(r.getMessage().startswith(WARMED) for r in caplog.records), "a windowed job warms the fan-out"
    assert not any("warm-up failed" in r.getMessage() for r in caplog.records)
    _run_handover(w, kafka_bootstrap, db_url)


def test_sliding_windows_hand_over_with_rows_to_both_owners_and_every_window_once(spark, kafka_bootstrap,
                                                                                   make_topics, unique_name,
                                                                                   tmp_path, db_url):
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=29,
                  operator="sliding_counts:SlidingCounts", py_files=[SLIDING], ref=sliding_reference)
    _run_handover(w, kafka_bootstrap, db_url)


def test_staggered_windows_hand_over_each_key_at_its_own_boundary_and_every_window_once(spark, kafka_bootstrap,
                                                                                        make_topics, unique_name,
                                                                                        tmp_path, db_url):
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=31,
                  operator="sliding_counts:StaggeredCounts", py_files=[SLIDING], ref=staggered_reference)
    _run_handover(w, kafka_bootstrap, db_url)


def test_a_handover_of_a_processor_without_windows_is_refused_and_the_job_runs_on_exactly(spark, kafka_bootstrap,
                                                                                          make_topics, unique_name,
                                                                                          tmp_path, db_url, caplog):
    caplog.set_level(logging.INFO, logger="ballast.runner")
    w = WindowJob(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, BINS, seed=31)
    assert not any(r.getMessage().startswith(WARMED) for r in caplog.records), "no windows: no handover to warm"
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
