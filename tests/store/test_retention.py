"""Retention of per-epoch metrics: old rows go, what the controller and the console read stays
(on SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ballast import store
from ballast.store.retention import prune_epoch_metrics
from migrations_db import models as m
from tests.helpers import dialects
from tests.helpers.epoch_seed import count_rows as _count
from tests.helpers.epoch_seed import seed_epochs as _seed

pytestmark = pytest.mark.controlplane
any_db = dialects.any_db  # a fresh migrated metrics DB, on SQLite then on PostgreSQL


def test_prune_deletes_old_epochs_and_keeps_recent_ones_and_every_bins_last_size(any_db, unique_name):
    now = datetime.now(UTC)
    other = unique_name + "-young"
    _seed(any_db, unique_name, epochs=180, bins=8, now=now)  # three hours of epochs
    _seed(any_db, other, epochs=30, bins=8, now=now)  # half an hour: nothing of it is old
    before = store.bin_range(any_db, unique_name, "keycount", 8, 121, 180)

    hour = timedelta(minutes=59, seconds=30)  # epoch 121 ended 59 min ago, epoch 120 60 min ago
    out = {p.job: p for p in prune_epoch_metrics(any_db, keep=hour, keep_epochs=20, now=now)}

    # the hour's window (epochs 121..180) is kept, the two hours before it are gone
    assert out[unique_name].keep_from_epoch == 121
    assert _count(any_db, m.EpochMetrics, unique_name) == 60 and _count(any_db, m.WorkerMetrics, unique_name) == 120
    assert _count(any_db, m.BinMetrics, unique_name) == 60 * 7 + 1  # + cold bin 0's only row (epoch 1)
    assert out[unique_name].epoch_rows == 120 and out[unique_name].bin_rows == 120 * 7
    assert out[unique_name].trace_rows == 120 and _count(any_db, m.EpochTrace, unique_name) == 60
    # what the console and the controller read over the window is unchanged, cold bin's size included
    after = store.bin_range(any_db, unique_name, "keycount", 8, 121, 180)
    assert after == before and after.bytes[0] == 1000
    assert len(store.epoch_window(any_db, unique_name, "keycount", 50)) == 50
    # a young job keeps everything
    assert out[other].epoch_rows == 0 and _count(any_db, m.BinMetrics, other) == 30 * 7 + 1
    # idempotent: a second run deletes nothing
    again = {p.job: p for p in prune_epoch_metrics(any_db, keep=hour, keep_epochs=20, now=now)}
    assert again[unique_name].bin_rows == 0 and again[unique_name].epoch_rows == 0


def test_keep_epochs_protects_a_job_that_stopped_long_ago(any_db, unique_name):
    now = datetime.now(UTC)
    _seed(any_db, unique_name, epochs=50, bins=4, now=now - timedelta(days=10))
    (p,) = prune_epoch_metrics(any_db, keep=timedelta(hours=1), keep_epochs=20, now=now)
    assert p.keep_from_epoch == 31 and _count(any_db, m.EpochMetrics, unique_name) == 20


def test_a_retention_that_keeps_nothing_is_refused(db_url):
    with pytest.raises(ValueError, match="must keep something"):
        prune_epoch_metrics(db_url, keep=timedelta(0))
