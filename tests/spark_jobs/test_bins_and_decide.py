"""Fast checks of the pure parts: bin layout and the decision rules."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from ballast.protocol import ControlStep, Move
from spark_jobs import bins as B
from spark_jobs.control import ControlRecord, decide, has_due_step, initial_state, tick_message
from spark_jobs.journal import JobMismatch, Journal

pytestmark = pytest.mark.dataplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


# ------------------------------------------------------------------ bins -----------------------
def test_bin_is_a_contiguous_key_range_for_any_k():
    rng = random.Random(1)
    keys = [B.store_key(rng.getrandbits(64) - (1 << 63), b"k%d" % i) for i in range(2000)]
    for k in (1, 4, 8, 12):
        for sk in keys:
            b = B.bin_of_store_key(sk, k)
            lo, hi = B.bin_range(b, k)
            assert lo <= sk and (hi is None or sk < hi)
            # raising k by one splits bin b into 2b and 2b+1, which tile the old range
            assert B.bin_of_store_key(sk, k + 1) in (2 * b, 2 * b + 1)
    assert B.bin_of_hash(-1, 8) == 255 and B.bin_of_hash(0, 8) == 0
    with pytest.raises(ValueError):
        B.bits_for(100)


def test_spark_bin_matches_python_layout(spark):

    df = spark.createDataFrame([(b"a",), (b"user-1",), (b"\x00\xff",)], "key binary")
    h, b, _ = B.routing_sql("key", 6, [0] * 64)
    for row in df.selectExpr(f"{h} AS h", f"{b} AS b").collect():
        assert row.b == B.bin_of_hash(row.h, 6)


def test_spark_worker_follows_an_arbitrary_assignment_at_4096_bins(spark):
    import random

    rnd = random.Random(7)
    assignment = [rnd.randrange(5) for _ in range(4096)]
    df = spark.createDataFrame([(f"user-{i}".encode(),) for i in range(3000)], "key binary")
    h, b, w = B.routing_sql("key", 12, assignment)
    rows = df.selectExpr(f"{h} AS h", f"{b} AS b", f"{w} AS w").collect()
    assert len({r.b for r in rows}) > 1000
    assert all(r.w == assignment[B.bin_of_hash(r.h, 12)] for r in rows)


@pytest.mark.parametrize("bad", [[], [0, -1], ["0); drop table x; --"]])
def test_assignment_literal_refuses_what_is_not_a_worker_list(bad):
    with pytest.raises(ValueError):
        B.assignment_literal(bad)


# ------------------------------------------------------------------ decisions ------------------
def _step(plan="p", step=1, steps=1, moves=((0, 0, 1),), workers=2, version=0, eff=NOW, job="j", op="keycount"):
    return ControlStep(job=job, operator=op, plan_id=plan, step=step, steps=steps, kind="moves" if moves else "noop",
                       moves=tuple(Move(*m) for m in moves), workers=workers, map_version=version,
                       issued_at=NOW, effective_at=eff)


def _run(st, msgs, epoch=5, now=NOW):
    recs = [ControlRecord(f"0:{i}", m if isinstance(m, bytes) else m.to_json()) for i, m in enumerate(msgs)]
    return decide(st, recs, epoch=epoch, now=now, job="j", operator="keycount", max_future_s=3600)


def test_decide_applies_one_valid_step_and_bumps_the_map():
    st = initial_state(8, 2)
    d = _run(st, [_step(moves=((0, 0, 1), (7, 1, 0)))])
    assert d.applied and d.applied.map_version_after == 1
    assert d.state_after.assignment[0] == 1 and d.state_after.assignment[7] == 0
    assert st.assignment[0] == 0, "input state is not mutated"
    assert [(e.action, e.checkpoint) for e in d.entries] == [("apply", True)]


@pytest.mark.parametrize("msg, why", [
    (_step(moves=((9, 0, 1),)), "unknown bin"),
    (_step(version=3), "map version mismatch"),
    (_step(moves=((0, 1, 0),)), "wrong source worker"),
    (_step(moves=((0, 0, 2),)), "workers must be <"),
    (_step(workers=1), "would sit on worker"),
    (_step(eff=NOW + timedelta(days=2)), "in the future"),
])
def test_decide_rejects_whole_step_with_reason(msg, why):
    st = initial_state(8, 2)
    d = _run(st, [msg])
    assert d.applied is None
    assert d.state_after.assignment == st.assignment and d.state_after.map_version == 0
    [e] = d.entries
    assert e.action == "reject" and why in e.reason and e.checkpoint


def test_malformed_and_foreign_are_events_not_checkpoints():
    d = _run(initial_state(8, 2), [b"{oops", json.dumps({"schema": "nope"}).encode(), _step(job="other"),
                                   tick_message("j", "keycount", NOW)])
    assert [(e.action, e.event, e.checkpoint) for e in d.entries] == [("reject", True, False)] * 3
    assert "other/keycount" in d.entries[2].reason


def test_queue_order_duplicates_and_supersede():
    st = initial_state(8, 2)
    s1 = _step(plan="a", step=1, steps=3, moves=((0, 0, 1),), version=0)
    s2 = _step(plan="a", step=2, steps=3, moves=((1, 0, 1),), version=1)
    s3 = _step(plan="a", step=3, steps=3, moves=((2, 0, 1),), version=2, eff=NOW + timedelta(seconds=30))
    d = _run(st, [s2, s1, s3])  # out of order: step 2 waits for step 1; one step per epoch
    assert d.applied.step == 1
    assert {(e.plan_id, e.step, e.action) for e in d.entries} == {
        ("a", 1, "apply"), ("a", 2, "queue"), ("a", 3, "queue")}
    assert not has_due_step(initial_state(8, 2), NOW)
    assert has_due_step(d.state_after, NOW)
    d2 = _run(d.state_after, [s1], epoch=6)  # duplicate of a finished step: no checkpoint, ack re-echo
    assert d2.applied.step == 2
    dup = [e for e in d2.entries if e.action == "duplicate"]
    assert dup and dup[0].reecho and not dup[0].checkpoint
    d3 = _run(d2.state_after, [], epoch=7)
    assert d3.applied is None and len(d3.state_after.queue) == 1  # step 3 not yet due
    d4 = _run(d3.state_after, [_step(plan="b", moves=((3, 0, 1),), version=2)], epoch=8)
    acts = {(e.plan_id, e.step): e.action for e in d4.entries}
    assert acts == {("a", 3): "supersede", ("b", 1): "apply"}
    d5 = _run(d4.state_after, [s3], epoch=9)  # a late step of a superseded plan
    assert [e.action for e in d5.entries] == ["duplicate"]


def test_moveless_step_changes_workers_and_bumps_the_version():
    d = _run(initial_state(8, 2), [_step(moves=(), workers=3)])
    assert d.applied and d.state_after.workers == 3 and d.state_after.map_version == 1
    d2 = _run(d.state_after, [_step(plan="q", moves=(), workers=3, version=1)], epoch=6)
    assert d2.state_after.map_version == 2, "a pure noop is a version too"


def test_step_after_a_rejected_step_is_rejected():
    st = initial_state(8, 2)
    bad = _step(plan="a", step=1, steps=2, version=9)
    nxt = _step(plan="a", step=2, steps=2, version=0)
    d = _run(st, [bad, nxt])
    assert [(e.step, e.action) for e in d.entries] == [(1, "reject"), (2, "reject")]
    assert "was rejected" in d.entries[1].reason


# ------------------------------------------------------------------ split ------------------------
def _split(bins, version=0, workers=2, plan="s"):
    import dataclasses

    return dataclasses.replace(_step(plan=plan, moves=(), workers=workers, version=version), kind="split", bins=bins)


def test_split_raises_the_bin_count_and_keeps_every_key_on_its_worker():
    st = initial_state(8, 2)
    st.assignment = [0, 1, 0, 1, 1, 0, 0, 1]
    d = _run(st, [_split(32)])
    assert d.applied and d.applied.bins_before == 8 and d.applied.bins == 32 and d.applied.moves == ()
    after = d.state_after.assignment
    assert len(after) == 32 and d.state_after.map_version == 1 and d.state_after.workers == 2
    assert all(after[b] == st.assignment[b >> 2] for b in range(32))  # bin b's quarters stay on b's worker
    # the next step addresses the new bins: move one quarter of old bin 0 away, alone
    d2 = _run(d.state_after, [_step(plan="m", moves=((1, 0, 1),), version=1)], epoch=6)
    assert d2.applied and d2.state_after.assignment[:4] == [0, 1, 0, 0]
    assert d2.warm == {}


@pytest.mark.parametrize("msg, why", [
    (_split(8), "must raise the bin count"),
    (_split(4), "must raise the bin count"),
    (_split(16, workers=3), "keeps the worker count"),
    (_split(16, version=2), "map version mismatch"),
])
def test_split_is_rejected_whole_when_it_cannot_apply(msg, why):
    st = initial_state(8, 2)
    d = _run(st, [msg])
    assert d.applied is None and d.state_after.assignment == st.assignment
    [e] = d.entries
    assert e.action == "reject" and why in e.reason and e.checkpoint


@pytest.mark.parametrize("doc, why", [
    ({"bins": 12}, "power of two"),
    ({"bins": 1 << 17}, "power of two"),
    ({"bins": True}, "must be int"),
    ({}, "missing field 'bins'"),
    ({"moves": [{"bin": 0, "from": 0, "to": 1}]}, "carries no moves"),
])
def test_split_message_shape_is_checked(doc, why):
    from ballast.protocol import ProtocolError, parse_control

    msg = {k: v for k, v in json.loads(_split(16).to_json()).items() if k != "bins"}
    with pytest.raises(ProtocolError, match=why):
        parse_control(json.dumps({**msg, **doc}))
    assert parse_control(_split(16).to_json()).bins == 16
    moves = json.loads(_step().to_json())
    with pytest.raises(ProtocolError, match="split steps only"):
        parse_control(json.dumps({**moves, "bins": 16}))


# ------------------------------------------------------------------ journal ---------------------
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


# ------------------------------------------------------------------ pre-copy ---------------------
def test_precopy_step_warms_one_epoch_then_applies():
    import dataclasses

    st = initial_state(8, 2)
    step = dataclasses.replace(_step(moves=((0, 0, 1), (5, 1, 0))), precopy=True)
    d = _run(st, [step], epoch=5)
    assert d.applied is None and d.warm == {"0": [5], "1": [0]}
    assert [e.action for e in d.entries] == ["queue"] and "pre-copy" in d.entries[0].reason
    assert has_due_step(d.state_after, NOW)  # the runner ticks for it
    d2 = _run(d.state_after, [], epoch=6)
    assert d2.applied and d2.applied.moves == (Move(0, 0, 1), Move(5, 1, 0)) and d2.warm == {}
    # a replay of the warm epoch decides the same (the decision is logged; this is the pure part)
    assert _run(st, [step], epoch=5).to_dict()["warm"] == d.to_dict()["warm"]


def test_precopy_flag_round_trips_and_must_be_a_boolean():
    import dataclasses

    from ballast.protocol import ProtocolError, parse_control

    s = dataclasses.replace(_step(), precopy=True)
    assert parse_control(s.to_json()).precopy is True
    assert "precopy" not in json.loads(_step().to_json())  # old messages are unchanged
    bad = json.loads(s.to_json())
    bad["precopy"] = "yes"
    with pytest.raises(ProtocolError, match="precopy"):
        parse_control(json.dumps(bad))


# ------------------------------------------------------------------ storage and operators --------
def test_location_keeps_the_scheme_and_writes_atomically(tmp_path):
    from spark_jobs.storage import Location

    loc = Location.of(f"file://{tmp_path}") / "a" / "b.json"
    assert loc.uri == f"file://{tmp_path}/a/b.json" and loc.path == f"{tmp_path}/a/b.json"
    assert loc.read_json() is None and not loc.exists()
    loc.write_json({"x": 1})
    assert loc.read_json() == {"x": 1} and (tmp_path / "a" / "b.json").exists()
    (tmp_path / "a" / "c.json.tmp-123").write_text("half")  # an interrupted write is never listed
    assert Location.of(tmp_path / "a").list() == ["b.json"]
    with pytest.raises(ValueError, match="cannot open storage location"):
        Location.of("nosuchscheme://x/y")


def test_user_operator_by_import_path_and_clear_errors():
    from spark_jobs.operator_loader import get_operator
    from spark_jobs.operators import KeyCount

    assert isinstance(get_operator("spark_jobs.operators:KeyCount"), KeyCount)
    with pytest.raises(ValueError, match="does not import"):
        get_operator("no_such_module:Op")
    with pytest.raises(ValueError, match="does not import"):
        get_operator("spark_jobs.operators:Nope")
    with pytest.raises(ValueError, match="not a subclass"):
        get_operator("spark_jobs.bins:MASK64")
    with pytest.raises(ValueError, match="unknown operator"):
        get_operator("nope")
