"""The two messages a job writes for the control plane, beside the control steps it reads.

`CheckpointMessage` is the ack of one step (the step checkpoint, on `<job>.control.acks` and in the
metrics DB); `RebalanceSignal` is a job's "look at me now" on `<job>.signals`. They live apart from
ballast.protocol, which holds the control step and the rules for reading any untrusted record, so
that module stays the one language of steps; both sides still import only pure Python from here.
The wire format of each is in docs/protocol.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from ballast.protocol import (
    MAX_NAME_CHARS,
    ProtocolError,
    brief,
    iso_utc,
    parse_document,
    parse_utc,
    required_field,
    text_field,
)

ACK_SCHEMA = "ballast.ack/v1"
STATUSES = ("applied", "rejected", "superseded")
SIGNAL_SCHEMA = "ballast.signal/v1"
MAX_SIGNAL_BYTES = 4096

CheckpointStatus = Literal["applied", "rejected", "superseded"]


@dataclass(frozen=True)
class CheckpointMessage:
    """Step checkpoint: the completion record of one step, what the controller waits on.

    For a message that could not even be parsed, plan_id is "" and step is 0; `message_offset`
    then names the control record (partition:offset) so an operator can find it.
    """

    job: str
    operator: str
    plan_id: str
    step: int
    status: CheckpointStatus
    applied_epoch: int | None
    applied_at: datetime | None
    completed_at: datetime
    bins_moved: int = 0
    keys_moved: int = 0
    bytes_moved: int = 0
    migration_ms: float = 0.0
    map_version_after: int | None = None
    reason: str = ""
    message_offset: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = ACK_SCHEMA
        d["applied_at"] = iso_utc(self.applied_at) if self.applied_at else None
        d["completed_at"] = iso_utc(self.completed_at)
        return d

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckpointMessage:
        d = {k: v for k, v in d.items() if k != "schema"}
        d["applied_at"] = parse_utc(d["applied_at"], "applied_at") if d.get("applied_at") else None
        d["completed_at"] = parse_utc(d["completed_at"], "completed_at")
        return cls(**d)


SIGNAL_SCHEMA = "ballast.signal/v1"
MAX_SIGNAL_BYTES = 4096


@dataclass(frozen=True)
class RebalanceSignal:
    """"Look at me now": DS2's inputs crossed a threshold in epoch `epoch`. It only wakes the
    rebalance DAG; DS2 and the guards decide, so a forged or stale one costs a DAG run, no more."""

    job: str
    operator: str
    epoch: int
    reason: str  # backlog_growing | busy | idle
    detail: str
    backlog: int
    busy: float
    at: datetime
    schema: str = SIGNAL_SCHEMA

    def to_json(self) -> bytes:
        d = asdict(self)
        d["at"] = iso_utc(self.at)
        return json.dumps(d, separators=(",", ":")).encode()


def parse_signal(raw: bytes | bytearray | str | None) -> RebalanceSignal:
    """A signal record, checked (schema, names, types); ProtocolError with a storable reason."""
    doc = parse_document(raw, MAX_SIGNAL_BYTES)
    if doc.get("schema") != SIGNAL_SCHEMA:
        raise ProtocolError(f"not a {SIGNAL_SCHEMA} message (schema {brief(doc.get('schema'))})")
    epoch = required_field(doc, "epoch", int)
    backlog = required_field(doc, "backlog", int)
    busy = required_field(doc, "busy", (int, float))
    if isinstance(epoch, bool) or isinstance(backlog, bool) or isinstance(busy, bool) or epoch < 0 or backlog < 0:
        raise ProtocolError("epoch and backlog must be non-negative integers, busy a number")
    return RebalanceSignal(job=text_field(doc, "job", MAX_NAME_CHARS),
                           operator=text_field(doc, "operator", MAX_NAME_CHARS), epoch=epoch,
                           reason=text_field(doc, "reason", 40), detail=text_field(doc, "detail", 500),
                           backlog=backlog, busy=float(busy), at=parse_utc(doc.get("at"), "at"))
