"""ballast.store.metrics: DS2's window is the last N epochs oldest first, with the per-worker rows of
exactly the epochs asked for; per-bin load sums the window's records and sizes are the latest seen,
from a given epoch on, ignoring a bin outside the job's range; whole-run reads start at an epoch."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ballast.store import writer
from ballast.store.metrics import bin_stats, epoch_rows, epoch_window, worker_rows, worker_window
from migrations_db import models as m
from tests.helpers.store_seed import BINS, JOB, OP, T0, commit_epoch

pytestmark = pytest.mark.store


def test_the_window_is_the_last_epochs_oldest_first(any_db: str) -> None:
    for e in (4, 1, 3, 2, 5):
        commit_epoch(any_db, e, records=e)
    assert [e.epoch for e in epoch_window(any_db, JOB, OP, 3)] == [3, 4, 5]
    assert [e.epoch for e in epoch_window(any_db, JOB, OP, 50)] == [1, 2, 3, 4, 5]
    assert epoch_window(any_db, JOB, "other", 3) == []
    last = epoch_window(any_db, JOB, OP, 1)[0]
    assert (last.input_rows, last.workers, last.map_version, last.backlog) == (5 * BINS, 2, 0, 0)
    assert last.started_at == T0 + timedelta(seconds=5) and last.ended_at.utcoffset() == timedelta(0)


def test_worker_rows_are_those_of_the_epochs_asked_for(any_db: str) -> None:
    for e in range(1, 5):
        commit_epoch(any_db, e, workers=2)
    assert worker_window(any_db, JOB, OP, []) == []
    got = worker_window(any_db, JOB, OP, [3, 1, 3])  # epoch 2 lies between them: not asked for
    assert [(w.epoch, w.worker) for w in got] == [(1, 0), (1, 1), (3, 0), (3, 1)]
    assert got[0].records_in == 10 * BINS // 2 and got[0].useful_ms == 10.0 and got[0].state_bytes == 100


def test_bin_load_sums_the_window_and_sizes_are_the_latest(any_db: str) -> None:
    empty = bin_stats(any_db, JOB, OP, BINS, 5)
    assert empty.load == (0.0,) * BINS and empty.bytes == (0,) * BINS and empty.epochs == 0
    for e in range(1, 6):
        commit_epoch(any_db, e, records=e, state_bytes=100 * e)
    st = bin_stats(any_db, JOB, OP, BINS, 3)  # epochs 3, 4, 5
    assert st.epochs == 3 and st.load == (12.0,) * BINS and st.bytes == (500,) * BINS and st.keys == (1,) * BINS
    since = bin_stats(any_db, JOB, OP, BINS, 5, since_epoch=4)  # a split at epoch 4: only 4 and 5
    assert since.epochs == 2 and since.load == (9.0,) * BINS


def test_a_bin_outside_the_jobs_range_is_ignored(any_db: str) -> None:
    commit_epoch(any_db, 1, records=2)
    with writer.epoch_transaction(any_db) as s:  # epoch 2 reports a bin the job does not have
        erow = m.EpochMetrics(job=JOB, operator=OP, epoch=2, map_version=0, workers=1, input_rows=1, batch_ms=1.0,
                              input_rate=1.0, backlog=0, started_at=T0, ended_at=T0)
        bins = [{"job": JOB, "operator": OP, "epoch": 2, "bin": b, "worker": 0, "records": 1, "state_keys": 1,
                 "state_bytes": 7} for b in (0, BINS + 3)]
        writer.replace_epoch_metrics(s, JOB, OP, 2, erow, [], bins)
    st = bin_stats(any_db, JOB, OP, BINS, 5)
    assert len(st.load) == BINS and st.load[0] == 3.0 and st.load[1] == 2.0 and st.bytes[0] == 7
    assert st.epochs == 2


def test_whole_run_reads_start_at_an_epoch(any_db: str) -> None:
    for e in range(1, 5):
        commit_epoch(any_db, e, workers=2)
    assert [e.epoch for e in epoch_rows(any_db, JOB, OP)] == [1, 2, 3, 4]
    assert [e.epoch for e in epoch_rows(any_db, JOB, OP, since_epoch=3)] == [3, 4]
    assert [(w.epoch, w.worker) for w in worker_rows(any_db, JOB, OP, since_epoch=4)] == [(4, 0), (4, 1)]
    assert epoch_rows(any_db, JOB, OP, since_epoch=9) == [] and worker_rows(any_db, "other", OP) == []
