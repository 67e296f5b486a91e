"""Fuzzing the control input (issue 14): >= 1 000 generated messages per run — valid, near-valid
and hostile (huge arrays, deep nesting, NaN, unicode, 10 MB values) — through the parser and
`decide`, unsigned and signed: 0 crashes, every rejection with a reason that the DB and Kafka can
take, the map unchanged by anything rejected."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ballast.protocol import MAX_INT, MAX_NAME_CHARS, MAX_PLAN_ID_CHARS, ProtocolError, parse_control
from ballast.signing import Keyring, SigningKey, sign
from spark_jobs.control import ControlRecord, decide
from spark_jobs.control_state import initial_state
from tests.helpers.fuzz_messages import NOW, encode, hostile_bytes, near_valid, valid_docs

pytestmark = [pytest.mark.security, pytest.mark.slow]  # ~1-2 min of Hypothesis examples

BINS = 8
KEY = SigningKey.of("k1", "fuzz-secret-0123456789")
RING = Keyring({"k1": KEY.secret})
VALID = valid_docs("j", "keycount", BINS)
MESSAGES = st.one_of(
    VALID.map(encode),
    near_valid(VALID).map(encode),
    near_valid(valid_docs("other", "keycount", BINS)).map(encode),
    hostile_bytes(),
)
SETTINGS = settings(max_examples=1100, deadline=None, derandomize=False, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


def db_safe(e) -> None:  # type: ignore[no-untyped-def]
    """What the runner writes for an entry fits the metrics DB's columns and the ack's JSON."""
    assert isinstance(e.reason, str) and "\x00" not in e.reason and len(e.reason) <= 500
    e.reason.encode("utf-8")
    assert len(e.plan_id) <= MAX_PLAN_ID_CHARS and "\x00" not in e.plan_id
    assert len(e.job) <= MAX_NAME_CHARS and len(e.operator) <= MAX_NAME_CHARS
    assert 0 <= e.step <= MAX_INT
    json.dumps(e.message, allow_nan=False) if e.message is not None else None


def check_one(raw: bytes, keyring: Keyring | None) -> str:
    try:
        parse_control(raw)
    except ProtocolError as exc:
        assert exc.reason
    before = initial_state(BINS, 2)
    d = decide(before, [ControlRecord("0:0", raw)], epoch=1, now=NOW, job="j", operator="keycount",
               max_future_s=3600, keyring=keyring)
    for e in d.entries:
        db_safe(e)
        if e.action == "reject":
            assert e.reason and (e.event or e.checkpoint)
    if not any(e.action == "apply" for e in d.entries):
        a, b = d.state_after, before
        assert (a.assignment, a.map_version, a.workers) == (b.assignment, b.map_version, b.workers)
    if any(e.action == "reject" for e in d.entries):
        assert d.applied is None and d.state_after.queue == []
    return d.entries[0].action if d.entries else "none"


def test_fuzz_parser_and_decide_unsigned_and_signed():
    seen: dict[str, int] = {}

    @SETTINGS
    @given(raw=MESSAGES, signed=st.booleans(), resign=st.booleans())
    def run(raw: bytes, signed: bool, resign: bool) -> None:
        ring = RING if signed else None
        if signed and resign:  # a signed variant of the same message (when it is an object at all)
            try:
                doc = json.loads(raw)
                if isinstance(doc, dict):
                    raw = json.dumps(sign(doc, KEY), allow_nan=True).encode()
            except Exception:
                pass
        act = check_one(raw, ring)
        seen[act] = seen.get(act, 0) + 1

    run()
    total = sum(seen.values())
    print(f"fuzzed {total} messages: {seen}")
    assert total >= 1000
    assert seen.get("reject", 0) > 100 and seen.get("apply", 0) + seen.get("queue", 0) > 10, seen
