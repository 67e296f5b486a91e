"""Every input record reaches its operator or the dead-letter topic, with a reason.

A record the operator cannot take is never a reason to stop the query: a stopped query replays
the same record at every restart (a crash loop). So each way a record can fail has a reason code,
written as the `ballast-reason` header of its dead letter in `<job>.dlq` (with `ballast-source` =
topic:partition:offset, `ballast-error` = the detail), and is counted in the epoch's
`dead_letters` metric. docs/dataplane.md, "Records of every shape", says which shape gets which.

Rows are rejected at two places: before routing (JVM side, `ProcessorOperator.keyed` puts the
reason in the `REJECT_COLUMN` and a null key: the row still travels to a worker, so its dead
letter is written by the same task attempt that commits the epoch, exactly once), and on the
worker (`split_rejected`: a null key; `decode_row`: a processor row Python cannot represent).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from ballast.errors import BallastError

NULL_KEY = "null-key"  # the operator's key extractor gave no key (default: both Kafka key and value null)
NULL_VALUE = "null-value"  # a processor with an input schema got a tombstone: nothing to parse
DECODE_ERROR = "decode-error"  # the value does not parse with the processor's input schema
OPERATOR_ERROR = "operator-error"  # the operator's fold or handler raised on the record
LATE = "late"  # event time below the epoch's watermark (processors in EventTime mode)
AHEAD = "event-time-ahead"  # event time beyond processing time + QuerySpec.max_ahead_ms
TIME_OUT_OF_RANGE = "time-out-of-range"  # a timestamp column a Python datetime cannot hold
TOO_LARGE = "too-large"  # an output or dead letter over MAX_RECORD_BYTES: sent without its key and value
UPGRADE_ERROR = "upgrade-error"  # a live upgrade could not carry the key's state over (spark_jobs.state_upgrade)
REASONS = (NULL_KEY, NULL_VALUE, DECODE_ERROR, OPERATOR_ERROR, LATE, AHEAD, TIME_OUT_OF_RANGE, TOO_LARGE,
           UPGRADE_ERROR)

# The largest record the job writes: its output and dead-letter topics are created with this
# `max.message.bytes` and its Kafka writer with this `max.request.size` (Kafka's default is 1 MB,
# and a key of several MB is echoed by a key count's output). Headroom for the record's overhead.
MAX_RECORD_BYTES = 16 << 20
RECORD_OVERHEAD = 64 << 10

DETAILS = {
    NULL_KEY: "the operator's key extractor gave a null key (the default one: Kafka key and value both null); "
              "give the record a key, or extract one in keyed()",
    NULL_VALUE: "a null value (tombstone) has no fields to parse with the processor's input_schema; "
                "produce a JSON value, or leave tombstones out of this topic",
    DECODE_ERROR: "the value does not parse as a JSON object of the processor's input_schema "
                  "(QuerySpec.input_schema); fix the producer or the schema",
    LATE: "its event time is below the epoch's watermark (raise QuerySpec.lateness_ms to accept it)",
    AHEAD: "its event time is more than QuerySpec.max_ahead_ms ahead of the epoch's processing time "
           "(a producer's clock or unit is off)",
}

REJECT_COLUMN = "reject"  # optional routed column: why `keyed` rejected the row (null: it did not)
# optional routed column: the row's event time (ms) when a worker decodes the row without rejecting it
# (null otherwise); the routing drops a handover's second copy by it (spark_jobs.handover.copies_kept)
# and never ships it to the workers
EVENT_MS_COLUMN = "event_ms"
# the epoch milliseconds a Python datetime holds (`utc_datetime`: years 1-9999)
DATETIME_MIN_MS, DATETIME_MAX_MS = -62_135_596_800_000, 253_402_300_799_999
REASON_HEADER = "ballast-reason"
MAX_ERROR_CHARS = 1000


class RowRejected(BallastError, ValueError):
    """A row the operator must not see; `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def dead_note(reason: str, topic: str, partition: Any, offset: Any, error: str = "", **extra: Any) -> str:
    """The note a dead letter carries through the changelog object to its Kafka headers."""
    return json.dumps({"reason": reason, "error": error[:MAX_ERROR_CHARS], "topic": topic,
                       "partition": partition, "offset": offset, **extra})


def dead_headers(epoch: int, reason: str, error: str, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kafka headers of a dead letter, from its note (`dead_note`)."""
    source = f"{info.get('topic')}:{info.get('partition')}:{info.get('offset')}"
    return [{"key": REASON_HEADER, "value": reason.encode()}, {"key": "ballast-error", "value": error.encode()},
            {"key": "ballast-epoch", "value": b"%d" % epoch}, {"key": "ballast-source", "value": source.encode()}]


def too_large(key: bytes | None, value: bytes | None, headers: list[dict[str, Any]]) -> int:
    """The record's payload size when it would not fit in MAX_RECORD_BYTES, else 0."""
    size = len(key or b"") + len(value or b"") + sum(len(h["key"]) + len(h["value"]) for h in headers)
    return size if size > MAX_RECORD_BYTES - RECORD_OVERHEAD else 0


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]


def input_topics(input_topic: str) -> list[str]:
    """The job's input topics: `--input-topic` lists a join's inputs comma-separated."""
    return [t.strip() for t in input_topic.split(",") if t.strip()]


def source_of(topics: list[str], partition: int, offset: int) -> tuple[str, int, int]:
    """(topic, Kafka partition, offset) of a routed row: with n > 1 input topics the routed
    partition is `partition * n + source` (spark_jobs.inputs)."""
    n = len(topics)
    if n <= 1:
        return (topics[0] if topics else ""), partition, offset
    return topics[partition % n], partition // n, offset


def rejected_mask(table: Any) -> Any:
    """Per row: `keyed` rejected it (REJECT_COLUMN) or its key is null (no store key, bin or fold)."""
    import pyarrow.compute as pc

    bad = pc.is_null(table.column("key"))
    if REJECT_COLUMN in table.column_names:
        bad = pc.or_(bad, pc.is_valid(table.column(REJECT_COLUMN)))
    return bad


def split_rejected(table: Any, topics: list[str]) -> tuple[Any, list[tuple[bytes | None, bytes | None, str]]]:
    """(rows for the operator, dead letters as (key, value, note)) of one worker's epoch.

    A row is rejected when `keyed` said so (REJECT_COLUMN) or its key is null: a store key, a
    bin and a fold all need one. Dead letters are sorted by (partition, offset) so that every
    attempt of the epoch writes them in the same order (their ids are epoch:worker:seq)."""
    import pyarrow.compute as pc

    bad = rejected_mask(table)
    has_reject = REJECT_COLUMN in table.column_names
    if not pc.any(bad).as_py():
        return (table.drop_columns([REJECT_COLUMN]) if has_reject else table), []
    rejected = table.filter(bad).sort_by([("partition", "ascending"), ("offset", "ascending")])
    kept = table.filter(pc.invert(bad))
    reasons = rejected.column(REJECT_COLUMN).to_pylist() if has_reject else [None] * rejected.num_rows
    dead = []
    for key, value, p, o, why in zip(rejected.column("key").to_pylist(), rejected.column("value").to_pylist(),
                                     rejected.column("partition").to_pylist(), rejected.column("offset").to_pylist(),
                                     reasons):
        topic, part, off = source_of(topics, p, o)
        reason = why or NULL_KEY
        dead.append((key, value, dead_note(reason, topic, part, off, DETAILS.get(reason, ""))))
    return (kept.drop_columns([REJECT_COLUMN]) if has_reject else kept), dead


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_datetime(ms: int) -> datetime:
    """A timestamp column's epoch milliseconds as the datetime a handler sees: aware, in UTC.
    Never the machine's zone (`datetime.fromtimestamp` without one made outputs depend on the
    host's TZ, so a replay elsewhere differed); aware, so `.timestamp()` is the same instant
    everywhere. Exact integer arithmetic, no float rounding."""
    return _EPOCH + timedelta(milliseconds=ms)


def decode_row(value: bytes, ts_columns: tuple[str, ...],
               event_time_column: str | None = None) -> tuple[dict[str, Any], int | None]:
    """A processor row from its routed JSON (timestamps as epoch ms) to the dict its handler
    sees, timestamp columns as datetimes, and its event time in ms (None: none).
    RowRejected when Python cannot represent it."""
    try:
        d = json.loads(value)
    except (ValueError, TypeError) as exc:
        raise RowRejected(DECODE_ERROR, f"the routed row is not JSON ({error_text(exc)})") from None
    if not isinstance(d, dict):
        raise RowRejected(DECODE_ERROR, f"the routed row is a JSON {type(d).__name__}, not an object")
    et = d.get(event_time_column) if event_time_column else None
    if et is not None and not isinstance(et, int):
        raise RowRejected(DECODE_ERROR, f"event-time column {event_time_column!r} = {et!r} is not epoch ms")
    for c in ts_columns:
        ms = d.get(c)
        if ms is None:
            continue
        try:
            d[c] = utc_datetime(ms)
        except (ValueError, OverflowError, OSError, TypeError) as exc:
            raise RowRejected(TIME_OUT_OF_RANGE, f"timestamp column {c!r} = {ms} ms is outside what a Python "
                                                 f"datetime holds (years 1-9999): {error_text(exc)}") from None
    return d, et


def _json_default(value: Any) -> Any:
    """Output rows' non-JSON values: a set in sorted order (its iteration order follows the
    process's hash seed, so it differs between the first attempt and a replay), the rest as str."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


def output_rows(item: Any) -> Iterator[dict[str, Any]]:
    """A handler yields Rows, dicts, tuples-with-fields or pandas DataFrames (transformWithStateInPandas)."""
    if hasattr(item, "to_dict") and hasattr(item, "columns"):
        yield from item.to_dict("records")
    elif hasattr(item, "asDict"):
        yield item.asDict()
    elif isinstance(item, dict):
        yield item
    else:
        raise TypeError(f"a processor must yield Row, dict or pandas.DataFrame, got {type(item).__name__}")


def encode_output(row: dict[str, Any]) -> bytes:
    """An output row as the value the job writes: compact JSON, sets sorted (`_json_default`)."""
    return json.dumps(row, default=_json_default, separators=(",", ":")).encode()


def row_letters(dl: list[tuple[bytes, tuple[str, int, int]]]) -> Callable[[], list[tuple[bytes, str]]]:
    """The dead letters of a key's rows when its handler fails: their notes are made only then."""
    return lambda: [(value, dead_note(OPERATOR_ERROR, *where)) for value, where in dl]


def timer_letter(ts: int, topic: str) -> Callable[[], list[tuple[bytes, str]]]:
    """The dead letter of a timer whose handler fails (no record: an empty value and the timer's time)."""
    return lambda: [(b"", json.dumps({"timer_ms": ts, "topic": topic}))]
