"""`python -m ballast.control open|fail` (plugins/ballast/control/__main__.py) on a real SQLite
metrics DB: the listing names an open plan, its owner and whether that run is alive; `fail` marks
it failed, which releases its operator for the next plan; failing it again says there is nothing to do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from ballast import store
from ballast.control.__main__ import main
from migrations_db import models as m
from migrations_db.db import session_scope

pytestmark = pytest.mark.controlplane


def _plan(job: str, plan_id: str, owner: str) -> store.PlanRecord:
    return store.PlanRecord(plan_id, job, "keycount", datetime.now(UTC), "batched", "emitting", 0, 1, 2,
                           (0, 1), 1, {}, None, "test", None, owner)


def test_open_lists_a_gone_runs_plan_and_fail_releases_its_operator(db_url, unique_name, capsys):
    job = unique_name
    store.save_plan(db_url, _plan(job, "left-over", "ballast_migrate/manual__old"), [])
    with session_scope(db_url) as s:  # its run stopped renewing the lease an hour ago
        s.execute(update(m.Plan).where(m.Plan.plan_id == "left-over")
                  .values(owner_seen_at=datetime.now(UTC) - timedelta(hours=1)))
    with pytest.raises(store.PlanConflict):  # the operator is held
        store.save_plan(db_url, _plan(job, "next", "ballast_migrate/manual__new"), [])

    assert main(["--db-url", db_url, "open", job]) == 0
    out = capsys.readouterr().out
    assert "left-over\tkeycount\temitting\towner=ballast_migrate/manual__old\tgone" in out

    assert main(["--db-url", db_url, "fail", "left-over", "--reason", "its run is gone"]) == 0
    capsys.readouterr()
    assert store.get_plan(db_url, "left-over").status == "failed"  # type: ignore[union-attr]
    assert main(["--db-url", db_url, "open", job]) == 0 and capsys.readouterr().out == ""
    store.save_plan(db_url, _plan(job, "next", "ballast_migrate/manual__new"), [])  # released
    assert main(["--db-url", db_url, "fail", "left-over"]) == 2
    assert "failed: nothing to do" in capsys.readouterr().err
