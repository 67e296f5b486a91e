"""Any exception a control record can raise becomes a rejection with a reason (issue 14).

Tried as a new user would: 100 000 nested brackets made `json.loads` raise RecursionError, which
`decide` did not catch, so the epoch failed and every restart replayed the same record.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ballast.protocol import MAX_MESSAGE_BYTES, ControlStep, Move, ProtocolError, parse_control
from spark_jobs.control import ControlRecord, decide
from spark_jobs.control_state import initial_state

pytestmark = pytest.mark.security

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _good(**kw) -> dict:
    d = ControlStep(job="j", operator="keycount", plan_id="p", step=1, steps=1, kind="moves",
                    moves=(Move(0, 0, 1),), workers=2, map_version=0, issued_at=NOW, effective_at=NOW).to_dict()
    d.update(kw)
    return d


def _decide(values, st=None, **kw):
    st = st or initial_state(8, 2)
    recs = [ControlRecord(f"0:{i}", v) for i, v in enumerate(values)]
    return decide(st, recs, epoch=3, now=NOW, job="j", operator="keycount", max_future_s=3600, **kw)


HOSTILE = {
    "nested brackets": b"[" * 100_000 + b"]" * 100_000,
    "nested objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "nested inside a good message": json.dumps(_good()).encode()[:-1] + b', "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    "nested tick look-alike": b'{"schema": "ballast.tick/v1", "a": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    "5000-digit number": b'{"schema": "ballast.control/v1", "step": ' + b"9" * 5000 + b"}",
    "huge step": json.dumps(_good(step=2**40, steps=2**40)).encode(),
    "NaN workers": json.dumps(_good(workers=float("nan"))).encode(),
    "Infinity map_version": b'{"schema": "ballast.control/v1", "map_version": Infinity}',
    "NUL in plan_id": json.dumps(_good(plan_id="a\x00b")).encode(),
    "lone surrogate in job": json.dumps(_good(job="\ud800")).encode(),
    "plan_id too long": json.dumps(_good(plan_id="p" * 101)).encode(),
    "year 1 with offset": json.dumps(_good(effective_at="0001-01-01T00:00:00+05:00")).encode(),
    "year 9999 with offset": json.dumps(_good(issued_at="9999-12-31T23:59:59-05:00")).encode(),
    "not UTF-8": b'{"schema": "\xff\xfe"}',
    "empty": b"",
    "null": None,
    "array": b"[1, 2, 3]",
    "huge schema string": json.dumps({"schema": "x" * 500_000}).encode(),
    "over the size bound": json.dumps(_good(reason="r" * MAX_MESSAGE_BYTES)).encode(),
    "10 MB value": b'{"schema": "ballast.control/v1", "reason": "' + b"z" * 10_000_000 + b'"}',
    "moves not objects": json.dumps(_good(moves=[[0, 0, 1]])).encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_record_is_a_rejection_with_reason_and_changes_nothing(name):
    st = initial_state(8, 2)
    d = _decide([HOSTILE[name]], st)
    assert d.applied is None and d.state_after.to_dict() == st.to_dict()
    [e] = d.entries
    assert e.action == "reject" and e.event and not e.checkpoint, e
    assert e.reason.startswith("malformed control message: ") and len(e.reason) <= 500, e.reason
    assert "\x00" not in e.reason
    e.reason.encode("utf-8")  # storable and echoable as is


def test_nested_brackets_rejection_says_why():
    [e] = _decide([HOSTILE["nested brackets"]]).entries
    assert "nested too deeply" in e.reason


def test_size_bound_is_checked_before_parsing_and_is_configurable():
    with pytest.raises(ProtocolError, match="larger than the 1048576-byte limit"):
        parse_control(HOSTILE["10 MB value"])
    small = json.dumps(_good()).encode()
    [e] = _decide([small], max_message_bytes=100).entries
    assert "larger than the 100-byte limit" in e.reason
    big_ok = json.dumps(_good(reason="r" * 1500)).encode()
    d = _decide([big_ok], max_message_bytes=4 * MAX_MESSAGE_BYTES)
    assert d.applied and d.applied.map_version_after == 1


def test_a_hostile_record_does_not_disturb_the_good_ones_around_it(monkeypatch):
    """The good step before and after still count; a record raising anything (here: a bug
    injected into step parsing for one plan) is rolled back alone."""
    import spark_jobs.control as ctl

    real = ctl.step_from_document

    def flaky(doc):
        if doc.get("plan_id") == "boom":
            raise KeyError("injected bug")
        return real(doc)

    monkeypatch.setattr(ctl, "step_from_document", flaky)
    first = json.dumps(_good(plan_id="a", steps=2)).encode()
    boom = json.dumps(_good(plan_id="boom")).encode()
    second = json.dumps(_good(plan_id="a", step=2, steps=2, moves=[{"bin": 1, "from": 1, "to": 0}],
                              map_version=1)).encode()
    d = _decide([first, HOSTILE["nested brackets"], boom, second])
    acts = [(e.action, e.plan_id, e.step) for e in d.entries]
    assert acts == [("reject", "", 0), ("reject", "", 0), ("apply", "a", 1), ("queue", "a", 2)], acts
    assert "KeyError" in d.entries[1].reason
    assert [q.step.plan_id for q in d.state_after.queue] == ["a"]


def test_a_tick_is_still_a_tick():
    from spark_jobs.control import tick_message

    assert _decide([tick_message("j", "keycount", NOW)]).entries == []
