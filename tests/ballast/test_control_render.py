"""ballast.control.render: a plan's table shows, per step, its moves (the first four, then "…"),
where it is (not sent, in flight at its Kafka position, applied or rejected), what it cost, and
the applied totals. On a real migrated SQLite metrics DB."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ballast import store
from ballast.control import manual
from ballast.control.render import summary_table
from ballast.protocol import step_from_document
from tests.helpers.stepapplier import apply_step

pytestmark = pytest.mark.controlplane


def _rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()[1:-1]]


def test_one_step_of_many_moves_shows_four_and_where_it_is(db_url, job):
    out = manual.plan_manual(db_url, job, {"target_workers": 2, "strategy": "all-at-once", "dry_run": False})
    plan_id = out["plan_id"]
    [step] = store.plan_steps(db_url, plan_id)
    moves = step.payload["moves"]
    assert len(moves) == 8
    table = summary_table(db_url, plan_id)
    head, total = table.splitlines()[0], table.splitlines()[-1]
    assert head.split() == ["step", "moves", "bins", "workers", "status", "epoch", "ms", "bytes", "emitted@offset"]
    shown = ", ".join(f"{m['bin']}:{m['from']}->{m['to']}" for m in moves[:4]) + " …"
    assert shown in table and _rows(table)[0][-8:] == ["8", "2", "not", "sent", "-", "-", "-", "-"]
    assert total == "total: 0/1 applied, 0 bins, 0 bytes, 0 ms migrating"

    store.mark_step_emitted(db_url, plan_id, 1, datetime.now(UTC), 0, 1234)
    assert _rows(summary_table(db_url, plan_id))[0][-5:] == ["flight", "-", "-", "-", "0:1234"]

    apply_step(db_url, job.job, job.operator, step_from_document(step.payload))
    table = summary_table(db_url, plan_id)
    assert _rows(table)[0][-5:] == ["applied", "1", "40", "8,000", "0:1234"]  # applied at epoch 1, 5 ms a bin
    assert table.splitlines()[-1] == "total: 1/1 applied, 8 bins, 8,000 bytes, 40 ms migrating"


def test_a_rejected_step_and_the_steps_after_it(db_url, job):
    out = manual.plan_manual(db_url, job, {"moves": [{"bin": 1, "to": 1}, {"bin": 2, "to": 1}], "strategy": "fluid",
                                           "dry_run": False})
    plan_id = out["plan_id"]
    first, second = store.plan_steps(db_url, plan_id)
    [mv] = first.payload["moves"]
    assert _rows(summary_table(db_url, plan_id))[0][:4] == ["1", f"{mv['bin']}:0->1", "1", "2"]
    apply_step(db_url, job.job, job.operator, step_from_document(first.payload), reject="stale map")
    rows = _rows(summary_table(db_url, plan_id))
    assert rows[0][4:7] == ["rejected", "-", "0"] and rows[1][4:6] == ["not", "sent"]
    assert summary_table(db_url, plan_id).splitlines()[-1].startswith("total: 0/2 applied")


def test_a_plan_without_steps_is_a_header_and_a_zero_total(db_url):
    table = summary_table(db_url, "nope")
    assert table.splitlines()[1] == "total: 0/0 applied, 0 bins, 0 bytes, 0 ms migrating"
