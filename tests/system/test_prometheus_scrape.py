"""A real Prometheus (Debian's package, tests/helpers/prometheus.py) scrapes a running job's
`--metrics-port` endpoint through a live 1 → 2 worker migration under a backlog, and PromQL over
its HTTP API returns what the metrics DB holds: last epoch, backlog, workers, map version, bins
moved, plan progress, records. Prometheus' own /graph page of the job's backlog and workers during
the migration is screenshotted with Debian's chromium (and copied to $BALLAST_UI_SHOTS when set,
e.g. docs/img/prometheus-backlog-migration.png)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import uniform_assignment
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.console_stack import browser, screenshot
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import checkpoints, steps_from_maps, zipf_keys
from tests.helpers.procs import free_port
from tests.helpers.prometheus import start_prometheus
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS = 16
N_RECORDS = 60_000
STEPS = 4
SHOT = "prometheus-backlog-migration.png"


def _maps() -> list[tuple[int, list[int]]]:
    """1 → 2 workers: worker 1's half of the bins, two per step."""
    target = uniform_assignment(BINS, 2)
    mine = [b for b in range(BINS) if target[b] == 1]
    a = [0] * BINS
    out = []
    for i in range(STEPS):
        a = list(a)
        for b in mine[2 * i:2 * i + 2]:
            a[b] = 1
        out.append((2, a))
    return out


def _db_latest(db_url: str, job: str) -> tuple[m.EpochMetrics, int, int, int]:
    """The last committed epoch's row, and the sums of input rows, dead letters and bins moved."""
    with session_scope(db_url) as s:
        row = s.scalars(select(m.EpochMetrics).where(m.EpochMetrics.job == job)
                        .order_by(m.EpochMetrics.epoch.desc())).first()
        assert row is not None
        s.expunge(row)
        rows = int(s.scalar(select(func.sum(m.EpochMetrics.input_rows)).where(m.EpochMetrics.job == job)) or 0)
        dead = int(s.scalar(select(func.sum(m.EpochMetrics.dead_letters)).where(m.EpochMetrics.job == job)) or 0)
        moved = int(s.scalar(select(func.sum(m.StepCheckpoint.bins_moved)).where(m.StepCheckpoint.job == job)) or 0)
    return row, rows, dead, moved


def test_prometheus_scrapes_what_the_metrics_db_holds(spark, kafka_bootstrap, make_topics, unique_name, tmp_path,  # type: ignore[no-untyped-def]
                                                      db_url, produce_with_spark) -> None:
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    produce_with_spark(topic, zipf_keys(N_RECORDS, 5_000, seed=11))
    port = free_port()
    # Prometheus first: it scrapes the job's port from the job's first epoch on
    prom = start_prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"])
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=1, trigger_ms=500, max_offsets_per_trigger=1500,
                    metrics_port=port)
    try:
        runner = start_job(spark, cfg)
    except BaseException:
        prom.stop()
        raise
    try:
        assert runner.prom is not None and runner.prom.port == port

        def alive() -> None:
            if runner.query.exception() is not None:
                raise AssertionError(f"query failed: {runner.query.exception()}")

        sel = f'{{job="{job}",operator="keycount"}}'
        wait_until(prom.targets_up, 60, "the job's endpoint scraped (target up)", check=alive)
        wait_until(lambda: (prom.value(f"ballast_backlog_records{sel}") or 0) > 0, 120,
                   "a backlog seen by Prometheus", check=alive)
        # the migration, under the backlog: one step every 3 s (queued by the job until due)
        now = datetime.now(UTC)
        steps = [dataclasses.replace(s, effective_at=now + timedelta(seconds=3 * i), issued_at=now)
                 for i, s in enumerate(steps_from_maps(job, "keycount", "plan-prom", BINS, _maps(),
                                                       start_workers=1))]
        send_control(kafka_bootstrap, job, [s.to_json() for s in steps])
        wait_until(lambda: len(checkpoints(db_url, job)) == STEPS, 240, "every step's checkpoint", check=alive)
        assert all(c.status == "applied" for c in checkpoints(db_url, job).values())
        backlog_mid = prom.value(f"ballast_backlog_records{sel}")
        print(f"[prometheus] backlog right after the plan: {backlog_mid}", flush=True)

        # drained and idle: no new epoch for a few triggers, then Prometheus has the last one
        def settled() -> bool:
            row, *_ = _db_latest(db_url, job)
            return row.backlog == 0 and time.time() - runner._last_batch_end > 3
        wait_until(settled, 600, "the backlog drained and the job idle", check=alive)
        row, rows, dead, moved = _db_latest(db_url, job)
        wait_until(lambda: prom.value(f"ballast_last_committed_epoch{sel}") == row.epoch, 30,
                   f"Prometheus at epoch {row.epoch}")

        promql = {
            "last epoch": (f"ballast_last_committed_epoch{sel}", row.epoch),
            "backlog": (f"ballast_backlog_records{sel}", row.backlog),
            "workers": (f"ballast_workers{sel}", row.workers),
            "map version": (f"ballast_map_version{sel}", row.map_version),
            "epoch time": (f"ballast_last_epoch_duration_seconds{sel}", row.batch_ms / 1000),
            "input rate": (f"ballast_input_rate_records_per_second{sel}", row.input_rate),
            "input records": (f"ballast_input_records_total{sel}", rows),
            "dead letters": (f"ballast_dead_letters_total{sel}", dead),
            "bins moved": (f"ballast_bins_moved_total{sel}", moved),
            "plan progress": (f"ballast_plan_progress_ratio{sel}", 1.0),
            "epochs": (f"count(ballast_last_committed_epoch{sel})", 1),
        }
        got = {k: prom.value(q) for k, (q, _) in promql.items()}
        for k, (q, want) in promql.items():
            print(f"[prometheus] {k}: {q} = {got[k]}  (metrics DB: {want})", flush=True)
        for k, (q, want) in promql.items():
            assert got[k] == pytest.approx(want, rel=1e-9), (k, q, got[k], want)
        assert rows == N_RECORDS and moved == BINS // 2 and row.workers == 2
        # p99 of the epoch time, as the dashboard's latency panel asks it
        p99 = prom.value(f"histogram_quantile(0.99, sum by (le) (ballast_epoch_duration_seconds_bucket{sel}))")
        assert p99 is not None and p99 > 0
        # the backlog over time, as Prometheus stored it: it rose and fell during the run
        series = prom.query(f"max_over_time(ballast_backlog_records{sel}[10m])")
        assert float(series[0]["value"][1]) > 0

        # Prometheus' own graph page: the job's backlog and W through the migration
        g = {"g0.expr": f"ballast_backlog_records{sel}", "g0.tab": "0", "g0.range_input": "5m",
             "g1.expr": f"ballast_workers{sel}", "g1.tab": "0", "g1.range_input": "5m"}
        drv = browser(1400, 1200)
        try:
            drv.get(f"{prom.url}/graph?{urllib.parse.urlencode(g)}")
            wait_until(lambda: len(drv.find_elements("css selector", "canvas, .graph svg, div.graph_chart svg")) >= 2
                       or len(drv.find_elements("css selector", ".graph_area .graph")) >= 2, 30,
                       "two graphs drawn")
            time.sleep(2)
            shot = screenshot(drv, tmp_path / SHOT)
            text = drv.find_element("css selector", "body").text
        finally:
            drv.quit()
        assert "ballast_backlog_records" in text and shot.stat().st_size > 20_000
        if os.environ.get("BALLAST_UI_SHOTS"):
            shutil.copy(shot, Path(os.environ["BALLAST_UI_SHOTS"]) / SHOT)
    finally:
        runner.stop()
        prom.stop()
    assert runner.prom is None  # the endpoint closed with the job

