"""An epoch's tail (spark_jobs.epoch_tail): it runs beside the caller, the next start or join waits
for it, tails run one at a time in epoch order, and a failing tail is logged, never raised."""

from __future__ import annotations

import logging
import threading

from spark_jobs.epoch_tail import EpochTail


def test_the_tail_runs_beside_the_caller_and_join_waits_for_it() -> None:
    release, ran = threading.Event(), []
    tail = EpochTail()
    tail.start(1, lambda: (release.wait(5), ran.append(1)))
    assert ran == []  # start returned while the tail waits: the caller (Spark's next epoch) goes on
    assert tail.join(timeout_s=0.05) is False
    release.set()
    assert tail.join(timeout_s=5) is True and ran == [1]
    assert tail.join() is True  # nothing running: at once


def test_tails_run_in_epoch_order_one_at_a_time() -> None:
    order: list[str] = []
    busy = threading.Lock()

    def work(e: int) -> None:
        assert busy.acquire(blocking=False), "two tails ran at once"
        try:
            order.append(f"start {e}")
            threading.Event().wait(0.02)
            order.append(f"end {e}")
        finally:
            busy.release()

    tail = EpochTail()
    for e in range(3):
        tail.start(e, lambda e=e: work(e))
    tail.join()
    assert order == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]


def test_a_failing_tail_is_logged_and_the_next_one_runs(caplog) -> None:
    ran = []
    tail = EpochTail()
    with caplog.at_level(logging.ERROR, logger="ballast.runner"):
        tail.start(7, lambda: 1 / 0)
        tail.start(8, lambda: ran.append(8))
        tail.join()
    assert ran == [8]
    assert "epoch 7: the work after its commit failed (the epoch stays committed)" in caplog.text
