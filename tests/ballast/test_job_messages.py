"""ballast.job_messages: a step checkpoint survives its ack's JSON round trip (an unparsed record's
too); a rebalance signal survives its own, and a malformed or oversized one is one ProtocolError.
Fast: no services."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ballast.job_messages import ACK_SCHEMA, CheckpointMessage, RebalanceSignal, parse_signal
from ballast.protocol import ProtocolError

pytestmark = pytest.mark.controlplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_a_checkpoint_round_trips_through_its_ack() -> None:
    cp = CheckpointMessage("j", "keycount", "p", 2, "applied", 7, NOW, NOW + timedelta(seconds=1), bins_moved=3,
                           keys_moved=30, bytes_moved=300, migration_ms=12.5, map_version_after=2, extra={"w": 1})
    d = json.loads(cp.to_json())
    assert d["schema"] == ACK_SCHEMA and d["applied_at"] == "2026-11-21T12:00:00Z"
    assert CheckpointMessage.from_dict(d) == cp
    unparsed = CheckpointMessage("j", "keycount", "", 0, "rejected", None, None, NOW, reason="not JSON",
                                 message_offset="0:17")
    assert CheckpointMessage.from_dict(unparsed.to_dict()) == unparsed and unparsed.to_dict()["applied_at"] is None


def test_a_signal_round_trips_and_malformed_ones_are_refused():
    at = datetime(2026, 11, 26, 14, 0, tzinfo=UTC)
    sig = RebalanceSignal(job="j", operator="op", epoch=7, reason="busy", detail="d", backlog=3, busy=0.95, at=at)
    assert parse_signal(sig.to_json()) == sig
    doc = json.loads(sig.to_json())
    for bad, why in ((dict(doc, schema="ballast.control/v1"), "not a ballast.signal/v1"),
                     (dict(doc, epoch=True), "must be int"), (dict(doc, backlog=-1), "must be in"),
                     (dict(doc, job="x" * 300), "longer than"), ({k: v for k, v in doc.items() if k != "at"}, "at")):
        with pytest.raises(ProtocolError, match=why):
            parse_signal(json.dumps(bad))
    with pytest.raises(ProtocolError, match="larger than"):
        parse_signal(json.dumps(dict(doc, detail="x" * 5000)))
