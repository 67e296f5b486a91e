"""Control protocol v1: the only language the control plane and the data plane share.

The controller (Airflow) writes one `ControlStep` per Kafka message on `<job>.control`; the job
reads that topic as a second source of its streaming query, applies steps in order at epoch
boundaries and answers every step with a `CheckpointMessage` (ballast.job_messages; metrics DB, echoed
on `<job>.control.acks`). This module is pure Python on purpose: both sides import it, neither pulls
the other's framework in. The full contract, with the rules that are enforced where, lives in
docs/protocol.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from ballast.code_version import CodeVersion, CodeVersionError
from ballast.errors import BallastError

SCHEMA = "ballast.control/v1"
KINDS = ("moves", "map", "noop", "split", "merge", "settings", "upgrade")

# Bounds of one control message, checked before anything else looks at it: a record larger than
# MAX_MESSAGE_BYTES is rejected unparsed (the job's --max-control-bytes overrides it). The field
# bounds are those of the metrics DB's columns, so nothing a message carries can fail a DB write.
MAX_MESSAGE_BYTES = 1 << 20
MAX_NAME_CHARS = 200  # job, operator (String(200) columns)
MAX_PLAN_ID_CHARS = 100  # plan_id (String(100))
MAX_REASON_CHARS = 2000
MAX_INT = 2**31 - 1  # step, steps, workers, map_version, bins and workers of moves (Integer columns)
MAX_REPORTED_CHARS = 500  # a rejection reason is clipped to this (it is echoed, logged and stored)
MAX_BINS = 1 << 16  # the largest bin count a job may have (a split may not go past it)
MAX_TRIGGER_MS = 3_600_000  # a settings step's trigger interval: at most an hour between epochs

StepKind = Literal["moves", "map", "noop", "split", "merge", "settings", "upgrade"]


class ProtocolError(BallastError, ValueError):
    """A control message that cannot be understood; `reason` is what gets recorded."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def clip(text: str, limit: int = MAX_REPORTED_CHARS) -> str:
    """`text` made safe to store, log and echo: no NUL, no lone surrogates, at most `limit` chars."""
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def brief(value: Any, limit: int = 60) -> str:
    """A short, safe rendering of an untrusted value for a rejection reason (never a deep repr)."""
    if isinstance(value, str):
        return clip(repr(value if len(value) <= limit else value[:limit] + "…"), limit + 10)
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if abs(value) < 10**18 else f"<int of {len(str(abs(value)))} digits>"
    if isinstance(value, (list, dict)):
        return f"<{type(value).__name__} of {len(value)}>"
    return f"<{type(value).__name__}>"


def describe_error(exc: BaseException) -> str:
    """The reason recorded for a control record that raised `exc` while being judged."""
    if isinstance(exc, ProtocolError):
        return clip(exc.reason)
    if isinstance(exc, RecursionError):
        return "nested too deeply to parse"
    return clip(f"{type(exc).__name__}: {exc}")


def control_topic(job: str) -> str:
    return f"{job}.control"


def acks_topic(job: str) -> str:
    return f"{job}.control.acks"


def signals_topic(job: str) -> str:
    """Where a job asks for a rebalance now (ballast.policy.signals); an Airflow asset watches it."""
    return f"{job}.signals"


def message_key(job: str, operator: str) -> bytes:
    """Kafka key of control and ack messages: one partition per (job, operator) keeps steps in order."""
    return f"{job}/{operator}".encode()


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso_utc(ts: datetime) -> str:
    """A message's timestamp as it travels: ISO-8601 in UTC with a Z (an aware time only)."""
    if ts.tzinfo is None:
        raise ProtocolError("timestamps must be timezone-aware UTC")
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_utc(value: Any, name: str) -> datetime:
    """The aware UTC time of a message's ISO-8601 field `name` (ProtocolError if it is none)."""
    if not isinstance(value, str):
        raise ProtocolError(f"{name} must be an ISO-8601 UTC string, got {type(value).__name__}")
    if len(value) > 64:
        raise ProtocolError(f"{name} is not ISO-8601: {brief(value)}")
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ProtocolError(f"{name} is not ISO-8601 UTC: {brief(value)}") from exc
    if ts.tzinfo is None:  # a naive time means the sender's local zone: ambiguous across machines
        raise ProtocolError(f"{name} must carry a UTC offset (Z or +00:00): {brief(value)}")
    try:
        return ts.astimezone(UTC)
    except (ValueError, OverflowError) as exc:  # year 1 / 9999 shifted out of range
        raise ProtocolError(f"{name} is not ISO-8601 UTC: {brief(value)}") from exc


@dataclass(frozen=True, order=True)
class Move:
    """Bin `bin` leaves worker `src` for worker `dst` (JSON keys: bin, from, to)."""

    bin: int
    src: int
    dst: int

    def to_dict(self) -> dict[str, int]:
        return {"bin": self.bin, "from": self.src, "to": self.dst}


@dataclass(frozen=True)
class Settings:
    """A job's run-time settings that a `settings` step changes live (None: left as it is).

    `trigger_ms`: the interval between epochs (Spark's processing-time trigger); 0 starts each epoch
    as soon as the one before ends. `max_records_per_epoch`: the most input records one epoch reads
    (Spark's maxOffsetsPerTrigger); 0 lifts the cap. Both need the streaming query restarted, which
    the job does in its own process at the step's epoch boundary (docs/protocol.md, "Settings steps").
    """

    trigger_ms: int | None = None
    max_records_per_epoch: int | None = None

    NAMES = ("trigger_ms", "max_records_per_epoch")

    def to_dict(self) -> dict[str, int]:
        return {k: v for k in self.NAMES if (v := getattr(self, k)) is not None}

    def over(self, older: Settings) -> Settings:
        """These settings on top of `older`: a field this one leaves None keeps its older value."""
        return Settings(**{k: v if (v := getattr(self, k)) is not None else getattr(older, k) for k in self.NAMES})

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Settings:
        """Parse a `settings` object: known names only, each an int in its range, at least one."""
        if not isinstance(doc, dict):
            raise ProtocolError(f"field 'settings' must be an object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - set(cls.NAMES))
        if unknown:
            raise ProtocolError(f"unknown setting(s) {brief(unknown)}; a settings step may change {cls.NAMES}")
        if not doc:
            raise ProtocolError(f"a settings step changes at least one of {cls.NAMES}")
        trigger = required_field(doc, "trigger_ms", int) if "trigger_ms" in doc else None
        if trigger is not None and trigger > MAX_TRIGGER_MS:
            raise ProtocolError(f"setting 'trigger_ms' must be in 0..{MAX_TRIGGER_MS}, got {brief(trigger)}")
        cap = required_field(doc, "max_records_per_epoch", int) if "max_records_per_epoch" in doc else None
        return cls(trigger_ms=trigger, max_records_per_epoch=cap)


@dataclass(frozen=True)
class ControlStep:
    """One step of a migration plan, as carried by one control message.

    `map_version` is the version the job must be at *before* the step (optimistic concurrency:
    a step planned against a stale map is rejected, never half-applied); `workers` is the worker
    count *after* it. `effective_at` means "not before": the job applies the step at the first
    epoch that starts at or after it.
    """

    job: str
    operator: str
    plan_id: str
    step: int
    steps: int
    kind: StepKind
    moves: tuple[Move, ...]
    workers: int
    map_version: int
    issued_at: datetime
    effective_at: datetime
    reason: str = ""
    precopy: bool = False  # warm the incoming bins at their new owners first; cut over an epoch later
    # hand the bins over at a window boundary (docs/handover.md): no state moves; the step applies
    # once the old owner's last window has closed
    handover: bool = False
    bins: int | None = None  # split and merge steps only: the bin count after the step (a power of two)
    settings: Settings | None = None  # settings steps only: what they change
    code: CodeVersion | None = None  # upgrade steps only: the processor version they deploy

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "job": self.job,
            "operator": self.operator,
            "plan_id": self.plan_id,
            "step": self.step,
            "steps": self.steps,
            "kind": self.kind,
            "moves": [m.to_dict() for m in self.moves],
            "workers": self.workers,
            "map_version": self.map_version,
            "issued_at": iso_utc(self.issued_at),
            "effective_at": iso_utc(self.effective_at),
            "reason": self.reason,
            **({"precopy": True} if self.precopy else {}),
            **({"handover": True} if self.handover else {}),
            **({"bins": self.bins} if self.bins is not None else {}),
            **({"settings": self.settings.to_dict()} if self.settings is not None else {}),
            **({"code": self.code.to_dict()} if self.code is not None else {}),
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()


def required_field(doc: dict[str, Any], name: str, typ: type | tuple[type, ...]) -> Any:
    """Field `name` of a message, present and of type `typ` (an int also within 0..MAX_INT)."""
    if name not in doc:
        raise ProtocolError(f"missing field {name!r}")
    value = doc[name]
    # bool is an int in Python; a flag where a number is expected is malformed
    if isinstance(value, bool) and typ in (int, (int,)):
        raise ProtocolError(f"field {name!r} must be int, got bool")
    if not isinstance(value, typ):
        want = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise ProtocolError(f"field {name!r} must be {want}, got {type(value).__name__}")
    if isinstance(value, int) and not 0 <= value <= MAX_INT:
        raise ProtocolError(f"field {name!r} must be in 0..{MAX_INT}, got {brief(value)}")
    return value


def text_field(doc: dict[str, Any], name: str, limit: int, required: bool = True) -> str:
    """A string field that the DB and the logs can take as is (bounded, no NUL, valid UTF-8)."""
    if not required and name not in doc:
        return ""
    value: str = required_field(doc, name, str)
    if len(value) > limit:
        raise ProtocolError(f"field {name!r} is longer than {limit} characters ({len(value)})")
    if "\x00" in value:
        raise ProtocolError(f"field {name!r} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"field {name!r} is not valid Unicode (lone surrogate)") from exc
    return value


def message_size(raw: bytes | bytearray | str) -> int:
    """Bytes of a record as it travels (a str counts its UTF-8 encoding)."""
    if isinstance(raw, str):
        return len(raw.encode("utf-8", "surrogatepass"))
    return len(raw)


def parse_document(raw: bytes | bytearray | str | None, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """The JSON object of one control record: size bound first, then JSON, then "is an object".

    Raises ProtocolError only (a RecursionError of deep nesting, a ValueError of a 5000-digit
    number, a bad encoding all become one), with a reason that is safe to store and echo.
    """
    if raw is None or len(raw) == 0:
        raise ProtocolError("empty message")
    if isinstance(raw, str) and len(raw) > max_bytes:  # cheap pre-check before encoding it
        raise ProtocolError(f"message is larger than the {max_bytes}-byte limit (at least {len(raw)} bytes)")
    size = message_size(raw)
    if size > max_bytes:
        raise ProtocolError(f"message is larger than the {max_bytes}-byte limit ({size} bytes)")
    try:
        doc = json.loads(raw)
    except RecursionError as exc:
        raise ProtocolError("not JSON we accept: nested too deeply") from exc
    except (UnicodeError, ValueError) as exc:  # JSONDecodeError is a ValueError; so is a huge int literal
        raise ProtocolError(f"not JSON: {describe_error(exc)}") from exc
    if not isinstance(doc, dict):
        raise ProtocolError(f"message must be a JSON object, got {type(doc).__name__}")
    return doc


def parse_control(raw: bytes | bytearray | str | None, max_bytes: int = MAX_MESSAGE_BYTES) -> ControlStep:
    """Parse and check the *shape* of one control message.

    Only what can be judged from the message alone is checked here (size, schema, types, bounds,
    step range, moves well-formed). What needs the job's state — bin range, owner, map version,
    worker bounds — is checked by the data plane (spark_jobs.control) at the epoch that applies it.
    """
    return step_from_document(parse_document(raw, max_bytes))


def step_from_document(doc: dict[str, Any]) -> ControlStep:
    """The ControlStep of an already parsed JSON object (see parse_control)."""
    if doc.get("schema") != SCHEMA:
        raise ProtocolError(f"unknown schema {brief(doc.get('schema'))}; expected {SCHEMA!r}")
    kind = required_field(doc, "kind", str)
    if kind not in KINDS:
        raise ProtocolError(f"unknown kind {brief(kind)}; expected one of {KINDS}")
    step, steps = required_field(doc, "step", int), required_field(doc, "steps", int)
    if steps < 1 or not 1 <= step <= steps:
        raise ProtocolError(f"step {step} of {steps} is out of range (steps are numbered 1..steps)")
    workers = required_field(doc, "workers", int)
    if workers < 1:
        raise ProtocolError(f"workers after the step must be >= 1, got {workers}")
    map_version = required_field(doc, "map_version", int)
    if map_version < 0:
        raise ProtocolError(f"map_version must be >= 0, got {map_version}")
    raw_moves = required_field(doc, "moves", list)
    moves: list[Move] = []
    seen: set[int] = set()
    for i, m in enumerate(raw_moves):
        if not isinstance(m, dict):
            raise ProtocolError(f"moves[{i}] must be an object")
        b, s, d = (required_field(m, k, int) for k in ("bin", "from", "to"))
        if min(b, s, d) < 0:
            raise ProtocolError(f"moves[{i}] has a negative bin or worker")
        if s == d:
            raise ProtocolError(f"moves[{i}] moves bin {b} from worker {s} to itself")
        if b in seen:
            raise ProtocolError(f"bin {b} appears twice in one step")
        seen.add(b)
        moves.append(Move(b, s, d))
    if kind in ("noop", "split", "merge", "settings", "upgrade") and moves:
        raise ProtocolError(f"{'an' if kind == 'upgrade' else 'a'} {kind} step carries no moves")
    bins: int | None = None
    if kind in ("split", "merge"):
        bins = required_field(doc, "bins", int)
        low = 2 if kind == "split" else 1
        if bins < low or bins & (bins - 1) or bins > MAX_BINS:
            raise ProtocolError(f"a {kind} step's bins must be a power of two in {low}..{MAX_BINS}, got {brief(bins)}")
    elif "bins" in doc:
        raise ProtocolError(f"field 'bins' belongs to split and merge steps only, not to a {kind} step")
    settings: Settings | None = None
    if kind == "settings":
        settings = Settings.from_dict(required_field(doc, "settings", dict))
    elif "settings" in doc:
        raise ProtocolError(f"field 'settings' belongs to settings steps only, not to a {kind} step")
    if (kind == "upgrade") != ("code" in doc):
        raise ProtocolError("an upgrade step carries field 'code' (ref, version), and only an upgrade step does")
    try:
        code = CodeVersion.from_dict(doc["code"]) if kind == "upgrade" else None
    except CodeVersionError as exc:
        raise ProtocolError(str(exc)) from None
    plan_id = text_field(doc, "plan_id", MAX_PLAN_ID_CHARS)
    if not plan_id:
        raise ProtocolError("plan_id must not be empty")
    precopy = doc.get("precopy", False)
    if not isinstance(precopy, bool):
        raise ProtocolError(f"field 'precopy' must be true or false, got {type(precopy).__name__}")
    handover = doc.get("handover", False)
    if not isinstance(handover, bool):
        raise ProtocolError(f"field 'handover' must be true or false, got {type(handover).__name__}")
    if handover and (precopy or kind != "moves" or not moves):
        raise ProtocolError("a handover is a moves step with moves and without precopy: a bin moves one way")
    reason = doc.get("reason", "")
    return ControlStep(
        job=text_field(doc, "job", MAX_NAME_CHARS),
        operator=text_field(doc, "operator", MAX_NAME_CHARS),
        plan_id=plan_id,
        step=step,
        steps=steps,
        kind=kind,
        moves=tuple(moves),
        workers=workers,
        map_version=map_version,
        issued_at=parse_utc(required_field(doc, "issued_at", str), "issued_at"),
        effective_at=parse_utc(required_field(doc, "effective_at", str), "effective_at"),
        reason=text_field(doc, "reason", MAX_REASON_CHARS) if isinstance(reason, str) else "",
        precopy=precopy,
        handover=handover,
        bins=bins,
        settings=settings,
        code=code,
    )
