"""The metrics DB (PostgreSQL) stopped for 30 s during a batched migration (issue 14), on its own
cluster and port. The job pauses at its next DB write (it never skips or doubles a step), writes
the rows it owes when the DB is back, and finishes exactly once; the controller reports the
outage, retries, and ends with the plan applied and verified. Kept down past a short
`--db-outage-s`, the DB fails the epoch (the query), and a restart replays it exactly once."""

from __future__ import annotations

import logging
from dataclasses import replace

import ballast_stack as stack  # loaded by tests/conftest.py (scripts/stack.py)
import pytest
from sqlalchemy import select

from migrations_db import models as m
from migrations_db.db import migrate, session_scope
from spark_jobs.offsets import committed_epochs
from spark_jobs.runner import start_job
from tests.helpers.fault_helpers import (
    check_exactly_once,
    check_plan_ended,
    fail_past_budget_then_restart,
    migrate_through_outage,
    planned_job,
)
from tests.helpers.procs import free_port
from tests.helpers.xdist_groups import OUTAGES

pytestmark = [pytest.mark.faults, pytest.mark.dataplane, pytest.mark.slow, OUTAGES]

BINS = 16
N = 24_000
OUTAGE_S = 30
BUDGET_S = 10  # the short --db-outage-s the second test outlasts


@pytest.fixture
def own_postgres(tmp_path):  # type: ignore[no-untyped-def]
    pg = stack.Postgres(tmp_path / "pg-root", free_port(), name="pg-fault")
    try:
        pg.up()
    except stack.StackError as exc:
        pytest.fail(f"PostgreSQL could not start: {exc}")
    migrate(pg.url)
    yield pg
    pg.down()
    pg.clean()


def test_metrics_db_down_30s_during_a_migration(spark, kafka_bootstrap, unique_name, tmp_path,
                                                own_postgres, caplog):
    pg = own_postgres
    db_url = pg.url
    job = unique_name
    cfg, maps = planned_job(kafka_bootstrap, db_url, job, str(tmp_path / "ckpt"), BINS, N, 8, "plan-db")
    topic = cfg.input_topic
    caplog.set_level(logging.WARNING)
    runner = start_job(spark, cfg)
    try:
        out = migrate_through_outage(runner, cfg, db_url, kafka_bootstrap, "plan-db", N, pg.down, pg.up, OUTAGE_S)
    finally:
        runner.stop()
    ctl, epochs_during = out["controller"], out["epochs_during_outage"]
    assert ctl.result and ctl.result["map_version"] == len(maps)
    waits = [r for r in caplog.records if r.name == "ballast.runner" and "metrics DB unreachable" in r.getMessage()]
    assert waits, "the job did not report waiting for the DB"
    assert any("reachable again" in r.getMessage() for r in caplog.records), "no catch-up reported"
    assert ctl.db_outages >= 1, "the controller did not report the outage"
    # the epochs of the outage: at most one got past the DB (the job pauses at its next write)
    assert epochs_during <= 1, f"{epochs_during} epochs committed with the DB down"
    # catch-up: one epoch_metrics row per committed epoch, nothing missing
    ckpt = cfg.checkpoint_dir + "/spark"
    with session_scope(db_url) as s:
        rows = {r.epoch for r in s.scalars(select(m.EpochMetrics).where(m.EpochMetrics.job == job))}
    assert set(committed_epochs(ckpt)) <= rows
    stats = check_exactly_once(db_url, kafka_bootstrap, job, topic, cfg.checkpoint_dir, cfg.state_location,
                               maps[-1][0], maps[-1][1], BINS, N, "plan-db", len(maps))
    print(f"DB down {OUTAGE_S}s: job waited {len(waits)} time(s), controller reported {ctl.db_outages} outage(s); "
          f"plan and input done {out['recovered_s']:.0f}s after the restart; {stats}")


def test_metrics_db_down_past_the_outage_budget_fails_the_epoch_and_a_restart_replays_it(
        spark, kafka_bootstrap, unique_name, tmp_path, own_postgres):
    pg = own_postgres
    db_url = pg.url
    job = unique_name
    cfg, maps = planned_job(kafka_bootstrap, db_url, job, str(tmp_path / "ckpt"), BINS, N // 2, 9, "plan-db-long")
    cfg = replace(cfg, db_outage_s=BUDGET_S)
    runner = start_job(spark, cfg)
    out = fail_past_budget_then_restart(spark, runner, cfg, db_url, kafka_bootstrap, "plan-db-long", N // 2,
                                        pg.down, pg.up)
    assert out["failed_after_s"] >= BUDGET_S, "the epoch failed before its outage budget was spent"
    assert "metrics DB" in str(out["error"]) or "OperationalError" in str(out["error"]), out["error"]
    # the failed epoch was replayed: every epoch Spark committed has its metrics rows
    with session_scope(db_url) as s:
        rows = {r.epoch for r in s.scalars(select(m.EpochMetrics).where(m.EpochMetrics.job == job))}
    assert set(committed_epochs(cfg.checkpoint_dir + "/spark")) <= rows
    stats = check_plan_ended(db_url, kafka_bootstrap, job, cfg.input_topic, cfg.checkpoint_dir, cfg.state_location,
                             maps, BINS, N // 2, "plan-db-long", out["controller"])
    print(f"--db-outage-s {BUDGET_S}: the query failed {out['failed_after_s']:.0f}s into the outage "
          f"({str(out['error'])[:200]}); plan {out['controller'].error or 'applied'}; {stats}")
