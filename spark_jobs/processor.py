"""Ballast's stateful-processor API, modelled on PySpark's `StatefulProcessor` (transformWithState).

A processor written for Spark's API runs under Ballast unchanged: Ballast calls the same methods
(`init(handle)`, `handleInputRows(key, rows, timerValues)`, `handleExpiredTimer(key, timerValues,
expiredTimerInfo)`, `close()`) and hands it a handle with the same methods (`getValueState`,
`getListState`, `getMapState`, `registerTimer`, `deleteTimer`, `listTimers`, `deleteIfExists`).
Each camelCase name also has its snake_case twin (`handle_input_rows`, `get_value_state`, ...),
so a processor written for Ballast first reads like the rest of this code base.

What differs from Spark is where the state lives: all state variables and timers of one grouping
key are one entry of the key's bin (`KeyState`, pickled), plus one timer-index entry per timer
under the bin's prefix (`spark_jobs.timers`), so they move with the bin, are in the durable
changelog of the epoch that changed them and are rebuilt from it like any other state. How the
query starts (`QuerySpec`: input schema, grouping columns, time mode, event-time column and its
allowed lateness) is the Ballast counterpart of `groupBy(...).transformWithState(...)` and
`withWatermark(...)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ballast.policy.handover import WindowSpec
from spark_jobs.key_state import KeyState, ListState, MapState, ValueState
from spark_jobs.state_upgrade import StateUpgrade

__all__ = ["ExpiredTimerInfo", "PreAggregate", "QuerySpec", "StateUpgrade", "StatefulProcessor",
           "StatefulProcessorHandle", "TimerValues", "bound_methods", "is_processor", "query"]

TIME_MODES = ("None", "ProcessingTime", "EventTime")


@dataclass(frozen=True)
class PreAggregate:
    """A combiner that runs in Spark's JVM inside the epoch, in the routing's stage after its shuffle
    (spark_jobs.pre_aggregate): the rows of one epoch that agree on `group_by` become one row, whose
    other columns are `aggregates` ((name, Spark SQL aggregate expression) pairs, e.g.
    `("bids", "count(*)")`), so the processor sees one row per group and epoch instead of one per
    record. `group_by` holds the query's grouping keys (a group belongs to one key); in
    EventTime mode the event-time column is an aggregate (its `max`, the group's latest record), and
    late or far-ahead records are dead-lettered before they are aggregated. Aggregate with exact
    types (counts, integer sums, min, max): a floating-point sum may differ in its last bits on a
    replay, and replays are byte-identical only if the aggregates are."""

    group_by: tuple[str, ...]
    aggregates: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if not self.group_by or not self.aggregates:
            raise ValueError("pre_aggregate needs group_by columns and at least one aggregate")

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.group_by, *(n for n, _ in self.aggregates))


@dataclass(frozen=True)
class QuerySpec:
    """How a processor's query starts under Ballast (Spark: readStream + from_json + withWatermark
    + groupBy(...).transformWithState(processor, outputSchema, "Append", timeMode)).

    `input_schema` is the DDL of the JSON in each Kafka record's value (None: the columns are the
    record's `key` and `value` as strings): declare the fields the query reads, no more — the parser
    skips the others, which costs less per record (NEXMark Q2's JVM half: 1.7-1.8x Spark's own
    query with all 18 fields of the union, 1.3-1.5x with the 2 it reads; `python -m bench.parse_width`),
    and a bad value in a field the query never reads does not make its record a dead letter;
    `grouping_keys` are columns of it; `event_time_column` (a timestamp column) and `lateness_ms`
    define the watermark in EventTime mode. With several input topics (a join) every topic's JSON is
    read with the same schema (a side's missing fields are null) and `source_column`, when set, names
    a column that tells the input's position (0, 1, …).
    `where` (a Spark SQL predicate) and `columns` ((name, Spark SQL expression) pairs, applied in order,
    generators such as explode allowed) run on the parsed rows before routing: a stateless query
    (a filter, a projection) or a key computed from the row (e.g. a NEXMark join key) needs no code
    in the processor. The watermark follows the rows that pass `where` (as a filter before Spark's
    `withWatermark` would). `pre_aggregate` (a `PreAggregate`) combines each epoch's rows per group
    in the JVM before they reach the processor. `sources`: the positions in the job's input topics
    the query reads (None: all); the job subscribes to those only, as a Spark query reads only the
    topics it names, and a row's `source_column` is still its topic's position in the full list.
    `max_ahead_ms` (EventTime): a row whose event time is further ahead of
    the epoch's processing time is a dead letter (`event-time-ahead`) and does not move the
    watermark, so one record stamped year 9999 cannot make every later row late (None: Spark's
    rule, no bound)."""

    input_schema: str | None = None
    grouping_keys: tuple[str, ...] = ("key",)
    time_mode: str = "None"
    event_time_column: str | None = None
    lateness_ms: int = 0
    source_column: str | None = None
    where: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    max_ahead_ms: int | None = None
    pre_aggregate: PreAggregate | None = None
    sources: tuple[int, ...] | None = None
    # the windows of the query's last window operator (EventTime): a bin can then move by handover
    # at a window boundary, with no state transfer (docs/handover.md); None: transfer or pre-copy only
    window: WindowSpec | None = None

    def __post_init__(self) -> None:
        if self.time_mode not in TIME_MODES:
            raise ValueError(f"time_mode must be one of {TIME_MODES}, got {self.time_mode!r}")
        if self.time_mode == "EventTime" and not self.event_time_column:
            raise ValueError("time_mode 'EventTime' needs event_time_column (the watermark's column)")
        if not self.grouping_keys:
            raise ValueError("grouping_keys must name at least one input column")
        if self.lateness_ms < 0:
            raise ValueError(f"lateness_ms must be >= 0, got {self.lateness_ms}")
        if self.max_ahead_ms is not None and self.max_ahead_ms < 0:
            raise ValueError(f"max_ahead_ms must be >= 0 or None (no bound), got {self.max_ahead_ms}")
        if self.sources is not None and (not self.sources or min(self.sources) < 0):
            raise ValueError(f"sources must name input positions 0, 1, ... (or be None: all), got {self.sources}")
        if self.window is not None and self.time_mode != "EventTime":
            raise ValueError("window (a handover's window boundary) needs time_mode 'EventTime'")
        pre = self.pre_aggregate
        if pre is not None:
            missing = [g for g in self.grouping_keys if g not in pre.group_by]
            if missing:
                raise ValueError(f"pre_aggregate.group_by {pre.group_by} must hold the grouping keys {missing}: "
                                 "an aggregated row belongs to one key")
            if self.event_time_column and self.event_time_column not in pre.columns:
                raise ValueError(f"pre_aggregate must aggregate the event-time column {self.event_time_column!r} "
                                 f"(e.g. ({self.event_time_column!r}, 'max({self.event_time_column})'))")


def query(processor: type, **spec: Any) -> type:
    """A subclass of `processor` that carries how its Ballast query starts, so
    `--operator module:Name` can name it: `Sessions = query(SessionProcessor, input_schema=...)`."""
    return type(processor.__name__, (processor,), {"ballast_query": QuerySpec(**spec),
                                                   "__module__": processor.__module__})


def is_processor(cls: Any) -> bool:
    """A class Ballast can run as a processor: Ballast's or PySpark's StatefulProcessor, or any
    class with `init` and one of `handleInputRows` / `handle_input_rows`."""
    if not isinstance(cls, type):
        return False
    has_input = callable(getattr(cls, "handleInputRows", None)) or callable(getattr(cls, "handle_input_rows", None))
    return callable(getattr(cls, "init", None)) and has_input


class TimerValues:
    """The epoch's processing time and watermark (the same on every replay of the epoch)."""

    def __init__(self, current_processing_time_ms: int = -1, current_watermark_ms: int = -1) -> None:
        self._p = current_processing_time_ms
        self._w = current_watermark_ms

    def getCurrentProcessingTimeInMs(self) -> int:
        return self._p

    def getCurrentWatermarkInMs(self) -> int:
        return self._w

    get_current_processing_time_in_ms = getCurrentProcessingTimeInMs
    get_current_watermark_in_ms = getCurrentWatermarkInMs


class ExpiredTimerInfo:
    def __init__(self, expiry_time_ms: int = -1) -> None:
        self._t = expiry_time_ms

    def getExpiryTimeInMs(self) -> int:
        return self._t

    get_expiry_time_in_ms = getExpiryTimeInMs



class StatefulProcessorHandle:
    """What `init(handle)` receives. The runtime points it at one grouping key at a time."""

    def __init__(self, time_mode: str = "None", timer_values: TimerValues | None = None) -> None:
        self.time_mode = time_mode
        self.timer_values = timer_values or TimerValues()
        self._current: KeyState | None = None
        self._declared: dict[str, str] = {}

    def _key_state(self) -> KeyState:
        if self._current is None:
            raise RuntimeError("state and timers are only available inside handleInputRows / handleExpiredTimer")
        return self._current

    def _declare(self, name: str, kind: str, ttl_ms: int | None) -> None:
        if ttl_ms is not None and (not isinstance(ttl_ms, int) or ttl_ms <= 0):
            raise ValueError(f"state {name!r}: ttl_duration_ms must be a positive int, got {ttl_ms!r}")
        if self._declared.get(name, kind) != kind:
            raise ValueError(f"state {name!r} is already a {self._declared[name]} state, not a {kind} state")
        self._declared[name] = kind

    def get_value_state(self, state_name: str, schema: Any = None, ttl_duration_ms: int | None = None) -> ValueState:
        self._declare(state_name, "value", ttl_duration_ms)
        return ValueState(self, state_name, ttl_duration_ms)

    def get_list_state(self, state_name: str, schema: Any = None, ttl_duration_ms: int | None = None) -> ListState:
        self._declare(state_name, "list", ttl_duration_ms)
        return ListState(self, state_name, ttl_duration_ms)

    def get_map_state(self, state_name: str, user_key_schema: Any = None, value_schema: Any = None,
                      ttl_duration_ms: int | None = None) -> MapState:
        self._declare(state_name, "map", ttl_duration_ms)
        return MapState(self, state_name, ttl_duration_ms)

    def _check_timers(self) -> None:
        if self.time_mode == "None":
            raise RuntimeError("timers need time_mode 'ProcessingTime' or 'EventTime' (QuerySpec.time_mode)")

    def register_timer(self, expiry_timestamp_ms: int) -> None:
        self._check_timers()
        self._key_state().timers.add(int(expiry_timestamp_ms))

    def delete_timer(self, expiry_timestamp_ms: int) -> None:
        self._check_timers()
        self._key_state().timers.discard(int(expiry_timestamp_ms))

    def list_timers(self) -> Iterator[int]:
        return iter(sorted(self._key_state().timers))

    def delete_if_exists(self, state_name: str) -> None:
        ks = self._key_state()
        for d in (ks.values, ks.lists, ks.maps):
            d.pop(state_name, None)

    getValueState = get_value_state
    getListState = get_list_state
    getMapState = get_map_state
    registerTimer = register_timer
    deleteTimer = delete_timer
    listTimers = list_timers
    deleteIfExists = delete_if_exists


class StatefulProcessor:
    """Subclass and implement `init` and `handle_input_rows` (or Spark's camelCase names).

    `ballast_query` says how the query starts; set it on the class or wrap with `query(...)`.
    `ballast_version` labels this code for live upgrades, and `ballast_upgrades` says how state
    written by other versions carries over (spark_jobs.state_upgrade; docs/operators.md)."""

    ballast_query: QuerySpec = QuerySpec()
    ballast_version: str = "1"
    ballast_upgrades: tuple[StateUpgrade, ...] = ()

    def init(self, handle: StatefulProcessorHandle) -> None:
        raise NotImplementedError("a processor declares its state variables in init(handle)")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        raise NotImplementedError("a processor implements handle_input_rows (or handleInputRows)")

    def handle_expired_timer(self, key: tuple, timer_values: TimerValues,
                             expired_timer_info: ExpiredTimerInfo) -> Iterator[Any]:
        return iter(())

    def close(self) -> None:
        """Called once after the epoch's keys and timers of this task."""


def bound_methods(proc: Any) -> tuple[Any, Any]:
    """(input handler, timer handler) of a processor of either naming style: the one the class
    overrides wins (Spark's camelCase when a PySpark processor is run as is)."""
    def pick(camel: str, snake: str) -> Any:
        own = getattr(proc, camel, None)
        base = getattr(StatefulProcessor, snake)
        if own is not None and callable(own):
            return own
        meth = getattr(proc, snake, None)
        if meth is not None and getattr(meth, "__func__", None) is not base:
            return meth
        return meth if meth is not None else (lambda *a: iter(()))

    return pick("handleInputRows", "handle_input_rows"), pick("handleExpiredTimer", "handle_expired_timer")
