"""spark_jobs.journal: the fixed settings of a job's first start are kept and a start with others
is refused with the values to use; an epoch's decision is logged once and a replay reads it back;
old decisions go, the newest one always stays."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ballast.protocol import ControlStep, Move
from spark_jobs import journal as J
from spark_jobs.control import ControlRecord, decide
from spark_jobs.control_state import initial_state
from spark_jobs.journal import JobMismatch, Journal

pytestmark = pytest.mark.dataplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _step(moves=((0, 0, 1),), version=0, plan="p"):  # type: ignore[no-untyped-def]
    return ControlStep(job="j", operator="keycount", plan_id=plan, step=1, steps=1, kind="moves",
                       moves=tuple(Move(*m) for m in moves), workers=2, map_version=version, issued_at=NOW,
                       effective_at=NOW)


def _run(st, msgs, epoch=5):  # type: ignore[no-untyped-def]
    recs = [ControlRecord(f"0:{i}", m.to_json()) for i, m in enumerate(msgs)]
    return decide(st, recs, epoch=epoch, now=NOW, job="j", operator="keycount", max_future_s=3600)


def test_journal_refuses_a_different_bin_count(tmp_path):
    j = Journal(tmp_path)
    j.ensure_job({"job": "j", "bins": 256})
    j.ensure_job({"job": "j", "bins": 256})
    with pytest.raises(JobMismatch, match="bins"):
        Journal(tmp_path).ensure_job({"job": "j", "bins": 512})


def test_journal_replays_the_logged_decision(tmp_path):
    j = Journal(tmp_path)
    d = _run(initial_state(8, 2), [_step()], epoch=4)
    j.write_decision(d)
    assert j.load_decision(4).to_dict() == d.to_dict()
    assert j.state_before(5).assignment == d.state_after.assignment
    assert j.state_before(4) is None
    j.gc(10_000)  # long after, with no newer decision: the newest file is the state, it stays
    assert j.state_before(10_001).assignment == d.state_after.assignment


def test_a_mismatch_names_every_changed_setting_with_both_values(tmp_path):
    first = {"job": "j", "bins": 256, "operator": "keycount"}
    assert Journal(tmp_path).ensure_job(first) == first
    assert Journal(tmp_path).ensure_job(dict(first)) == first  # a restart gets the stored settings back
    with pytest.raises(JobMismatch) as err:
        Journal(tmp_path).ensure_job({"job": "j", "bins": 512, "operator": "wordcount"})
    msg = str(err.value)
    assert "bins: checkpoint has 256, start asked for 512" in msg
    assert "operator: checkpoint has 'keycount', start asked for 'wordcount'" in msg
    assert "job: checkpoint has" not in msg and "a new checkpoint dir" in msg and str(tmp_path) in msg
    with pytest.raises(JobMismatch, match="topic: checkpoint has None"):  # a setting the first start lacked
        Journal(tmp_path).ensure_job({**first, "topic": "t"})
    assert (Journal(tmp_path).dir / "job.json").read_json() == first, "a refused start changes nothing"


def test_the_state_before_an_epoch_is_the_newest_decision_before_it(tmp_path):
    j = Journal(str(tmp_path))
    assert j.latest_state() is None and j.state_before(0) is None and j.load_decision(3) is None
    d3 = _run(initial_state(8, 2), [_step()], epoch=3)
    d10 = _run(d3.state_after, [_step(moves=((1, 0, 1),), version=1, plan="q")], epoch=10)
    j.write_decision(d10)
    j.write_decision(d3)
    (j.decisions / "notes.txt").write_bytes(b"not a decision")
    assert j.state_before(3) is None
    assert j.state_before(4).to_dict() == j.state_before(10).to_dict() == d3.state_after.to_dict()
    assert j.state_before(11).to_dict() == j.latest_state().to_dict() == d10.state_after.to_dict()
    assert j.latest_state().map_version == 2
    assert j.spark_checkpoint.path == f"{tmp_path}/spark"


def test_gc_keeps_the_recent_epochs_and_always_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(J, "KEEP_EPOCHS", 10)
    j = Journal(tmp_path)
    st = initial_state(8, 2)
    for e in (1, 5, 12, 20):
        j.write_decision(_run(st, [], epoch=e))
    j.gc(22)  # keeps epochs >= 12
    assert sorted(j.decisions.list()) == [f"{e:012d}.json" for e in (12, 20)]
    j.gc(1_000)
    assert j.decisions.list() == [f"{20:012d}.json"]
    assert j.latest_state() is not None
