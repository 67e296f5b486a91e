"""Running a stateful processor (spark_jobs.processor) inside Ballast's data plane.

Driver side, `ProcessorOperator.keyed(df)` (JVM expressions, before routing): parse each Kafka
value with the query's input schema, key = JSON of the grouping columns, value = JSON of the row
with timestamps as epoch milliseconds (and its event time, for a handover's routing). Worker side,
`run_processor` does in one epoch of one worker what Spark's TransformWithStateExec does in one
batch of one partition, in a fixed order so that every attempt computes the same changes and outputs:

1. rows `keyed` rejected (a value that does not parse) or without a key go to the dead-letter
   topic (spark_jobs.records); the rest sorted by (hash, key, Kafka partition, offset), grouped by
   key; in EventTime mode a row whose event time is below the epoch's watermark is late: a dead
   letter with reason `late` (and counted in `late_rows`), and one further ahead of the epoch's
   processing time than `QuerySpec.max_ahead_ms` is one with reason `event-time-ahead`;
2. per key: load its `KeyState`, `handleInputRows(key, rows, timerValues)`, save it;
3. per owned bin in order: fire the user timers due at the epoch's clock (event time: watermark;
   processing time: processing time) with `handleExpiredTimer`, deleting each as it fires; then
   clean up the keys whose TTL expired;
4. record every put/delete by bin for the changelog object, and report the earliest pending
   timer and TTL expiry so the driver knows when an epoch without input must still run tasks.

A handler that raises dead-letters the key's rows (or the timer) and leaves the key's state as it
was before the call: a poisoned record cannot wedge the job. After a live upgrade, a key's state
written by another version is carried over before its handler runs (spark_jobs.state_upgrade); a
key whose carry-over fails is dead-lettered the same way, with reason `upgrade-error`. A handover
splits the bin's rows and timer outputs between its owners (spark_jobs.handover, _sessions)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from spark_jobs import pre_aggregate, timers
from spark_jobs.bins import decode_value, encode_value, store_key
from spark_jobs.handover import event_ms, without_fresh_rejects
from spark_jobs.handover_sessions import TaskHandovers
from spark_jobs.inputs import NO_EMPTY_PROPAGATION
from spark_jobs.key_state import KeyState
from spark_jobs.objects import DEAD_LETTER, OUTPUT
from spark_jobs.operators import Operator
from spark_jobs.processor import ExpiredTimerInfo, QuerySpec, StatefulProcessorHandle, TimerValues, bound_methods
from spark_jobs.query_input import INTERNAL, parsed_rows, timestamp_columns
from spark_jobs.records import (
    AHEAD,
    LATE,
    OPERATOR_ERROR,
    REJECT_COLUMN,
    UPGRADE_ERROR,
    RowRejected,
    dead_note,
    decode_row,
    encode_output,
    error_text,
    input_topics,
    output_rows,
    row_letters,
    source_of,
    split_rejected,
    timer_letter,
)
from spark_jobs.shadow import Shadow
from spark_jobs.state_upgrade import UpgradeFailed, VersionChain


class ProcessorOperator(Operator):
    """Adapts a processor class to the data plane's operator interface (routing + worker)."""

    name = "processor"

    def __init__(self, cls: type, chain: VersionChain | None = None) -> None:
        self.cls = cls
        # the job's versions when an upgrade step has run (spark_jobs.state_upgrade); None: this one only
        self.chain = chain
        spec = getattr(cls, "ballast_query", None)
        self.spec: QuerySpec = spec if isinstance(spec, QuerySpec) else QuerySpec()
        self.ts_columns: tuple[str, ...] = ()

    def keyed(self, df, clock: Any = None):
        """The rows to route (key, value, partition, offset, reject) of the epoch whose `clock`
        (spark_jobs.timers.EpochClock; None: the warm-up) a pre-aggregating query needs; such a
        query's rows combined per group without the routing (the epoch combines after it: `combine`)."""
        rows = self.key(self.prepare(df), clock)
        if self.spec.pre_aggregate is None:
            return rows
        return pre_aggregate.combine(rows, self.spec, self.ts_columns, routed=False)

    def prepare(self, df: Any) -> Any:
        """The epoch-free half of `keyed` (the runner applies it once, to the stream: spark_jobs.stream_plan):
        the parsed rows, checked against the grouping keys and the event-time column."""
        spec = self.spec
        if spec.pre_aggregate is not None:
            # an epoch with no rows aggregates to an empty shuffle stage, from which AQE would
            # propagate an empty relation through the routing: no task would run, and a commit
            # needs all W (epochs run without AQE, spark_jobs.session.EPOCH_CONF; this holds if a session
            # turns it back on). Set once here, where the stream's plan is made, not in every epoch's key
            df.sparkSession.conf.set("spark.sql.adaptive.optimizer.excludedRules", NO_EMPTY_PROPAGATION)
        rows = parsed_rows(df, spec)
        cols = [f for f in rows.schema.fields if f.name not in INTERNAL]
        missing = [g for g in spec.grouping_keys if g not in {f.name for f in cols}]
        if missing or (spec.event_time_column and spec.event_time_column not in {f.name for f in cols}):
            raise ValueError(f"processor {self.cls.__name__}: grouping key(s) {missing} or event-time column "
                             f"{spec.event_time_column!r} not among the input columns {[f.name for f in cols]}")
        self.ts_columns = timestamp_columns(cols)
        return rows

    @property
    def epoch_free(self) -> bool:
        """Whether `key` needs no epoch: only a pre-aggregating query's late filter reads the clock."""
        return self.spec.pre_aggregate is None

    def key(self, rows: Any, clock: Any = None) -> Any:
        """`prepare`'s rows keyed for routing; a pre-aggregating query's marked, to combine after the
        routing (spark_jobs.pre_aggregate.mark, `combine`)."""
        if self.spec.pre_aggregate is not None:
            return pre_aggregate.mark(rows, self.spec, self.ts_columns, clock)
        return self._keyed_rows(rows, [f for f in rows.schema.fields if f.name not in INTERNAL])

    def _keyed_rows(self, rows: Any, cols: Any) -> Any:
        from pyspark.sql import functions as F

        fields = [F.unix_millis(F.col(f.name)).alias(f.name) if f.name in self.ts_columns else F.col(f.name)
                  for f in cols]
        ok = F.col("__reject").isNull()  # rejected: null key, the raw value, the reason (spark_jobs.records)
        return rows.select(
            F.when(ok, F.to_json(F.struct(*[F.col(g) for g in self.spec.grouping_keys])).cast("binary")).alias("key"),
            F.when(ok, F.to_json(F.struct(*fields)).cast("binary")).otherwise(F.col("__raw")).alias("value"),
            F.col("__p").alias("partition"), F.col("__o").alias("offset"), F.col("__reject").alias(REJECT_COLUMN),
            *event_ms(self.spec, self.ts_columns, cols, ok))

    def combine(self, routed: Any) -> Any:
        """A pre-aggregating query's `key` rows combined per group, after the routing
        (spark_jobs.routing.route, which adds the routing's columns): spark_jobs.pre_aggregate."""
        return pre_aggregate.combine(routed, self.spec, self.ts_columns, routed=True)

    def sources(self) -> tuple[int, ...] | None:
        return self.spec.sources

    def task_conf(self) -> dict[str, Any]:
        """What the workers need beyond the class (known only after `keyed` saw the schema)."""
        return {"ts_columns": list(self.ts_columns)}

    def fold(self, key: bytes, state: bytes | None, values: Any) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        raise TypeError("a processor runs through run_processor, not fold")


class _Changes:
    """Puts/deletes of one epoch, applied to the cache and recorded by bin (changelog + counters)."""

    def __init__(self, txn: Any, db: Any, k: int) -> None:
        self.txn, self.db, self.k = txn, db, k
        self.by_bin: dict[int, dict[bytes, bytes | None]] = {}
        self.delta: dict[int, list[int]] = {}

    def set(self, b: int, sk: bytes, value: bytes | None) -> None:
        old = self.txn.get(sk, db=self.db)
        if old == value:
            return
        d = self.delta.setdefault(b, [0, 0])
        if value is None:
            self.txn.delete(sk, db=self.db)
            d[0] -= 1
            d[1] -= len(sk) + len(old)
        else:
            self.txn.put(sk, value, db=self.db)
            d[0] += old is None
            d[1] += len(value) - (len(old) if old is not None else -len(sk))
        self.by_bin.setdefault(b, {})[sk] = value

    def finish(self, cache: Any, writer: Any) -> dict[int, tuple[int, int]]:
        for b in sorted(self.by_bin):
            ch = self.by_bin[b]
            writer.add_bin(b, list(ch), list(ch.values()))
        return cache.add_bin_counters(self.txn, {b: (d[0], d[1]) for b, d in self.delta.items() if d[0] or d[1]})


class _Runtime:
    """One task's processor, handle and key-state bookkeeping."""

    def __init__(self, op: ProcessorOperator, clock: Any, changes: _Changes, writer: Any, input_topic: str) -> None:
        self.spec = op.spec
        self.tv = TimerValues(clock.processing_ms, clock.watermark_ms if op.spec.time_mode == "EventTime" else -1)
        self.now = clock.processing_ms
        self.handle = StatefulProcessorHandle(op.spec.time_mode, self.tv)
        self.proc = op.cls()
        self.proc.init(self.handle)
        self.on_rows, self.on_timer = bound_methods(self.proc)
        self.ch, self.writer, self.topic, self.chain = changes, writer, input_topic, op.chain
        self.shadow: Shadow | None = None  # a shadow upgrade's new version (run_processor sets it)

    def load(self, sk: bytes, key: bytes) -> tuple[KeyState, bytes | None]:
        raw = self.ch.txn.get(sk, db=self.ch.db)
        state = decode_value(sk, raw, key) if raw is not None else None
        return KeyState(state), state

    def save(self, b: int, sk: bytes, key: bytes, ks: KeyState, before: KeyState) -> None:
        ks.compact(self.now)
        k = self.ch.k
        for ts in sorted(before.timers - ks.timers):  # sorted: the changelog's order is not a set's
            self.ch.set(b, timers.index_key(sk, k, timers.USER, ts), None)
        for ts in sorted(ks.timers - before.timers):
            self.ch.set(b, timers.index_key(sk, k, timers.USER, ts), key)
        old_x, new_x = before.next_expiry(), ks.next_expiry()
        if old_x != new_x:
            if old_x is not None:
                self.ch.set(b, timers.index_key(sk, k, timers.TTL, old_x), None)
            if new_x is not None:
                self.ch.set(b, timers.index_key(sk, k, timers.TTL, new_x), key)
        if ks.same(before):
            return
        blob = ks.to_bytes()
        self.ch.set(b, sk, encode_value(sk, key, blob) if blob is not None else None)

    def call(self, b: int, sk: bytes, key: bytes, fn: Any, dead: Callable[[], list[tuple[bytes, str]]],
             emit: bool = True) -> int:
        """Run one handler call `fn(handlers)` on the key's state; returns dead letters written (0, or
        all of `dead()`: the records it was called for with their notes, made only when the handler
        failed). A shadow upgrade makes the same call with the new version on a copy (spark_jobs.shadow).
        `emit` False: the state changes, the outputs are dropped (a handover's other owner emits them)."""
        ks_before, raw = self.load(sk, key)
        ks = KeyState(raw)
        self.handle._current = ks
        try:
            if self.chain is not None:  # state written by another version is carried over on first use
                self.chain.carry(ks)
            rows = [r for item in (fn(self) or ()) for r in output_rows(item)]
            outs = [encode_output(r) for r in rows]  # a row that cannot be written is the handler's failure
        except Exception as exc:
            if self.shadow is not None:
                self.shadow.observe(key, raw, fn, None, error_text(exc))
            letters = dead()
            upgrade = isinstance(exc, UpgradeFailed)  # the state was never handed to the handler
            for value, where in letters:
                note = json.loads(where)
                note.update(reason=UPGRADE_ERROR if upgrade else note.get("reason", OPERATOR_ERROR),
                            error=error_text(exc))
                self.writer.add_output(DEAD_LETTER, key, value, json.dumps(note))
            return len(letters)
        finally:
            self.handle._current = None
        if self.shadow is not None:
            self.shadow.observe(key, raw, fn, rows)
        for v in outs if emit else ():
            self.writer.add_output(OUTPUT, key, v)
        self.save(b, sk, key, ks, ks_before)
        return 0


def run_processor(cfg: Any, cache: Any, txn: Any, table: Any, n: int, owned: set[int], writer: Any,
                  op: ProcessorOperator, shadow_op: ProcessorOperator | None = None, roles: Any = None,
                  ) -> tuple[int, dict[int, tuple[int, tuple[int, int] | None, int]], dict[str, Any]]:
    """One epoch of one worker (module docstring). Returns (dead letters, per-bin (records,
    counters, fold µs of its records), extra metrics: max_event_ms, late_rows, next_timer_ms,
    next_expiry_ms, timers_fired, and a shadow upgrade's tally when `shadow_op` is tried).
    `roles`: bin -> (role, BinHandover) of the bins this worker shares in a handover: which rows each
    owner folds and whose timers' outputs it keeps (spark_jobs.handover, spark_jobs.handover_sessions)."""
    from pyspark.sql import Row

    k = cfg.bins_bits
    changes = _Changes(txn, cache.data, k)
    if getattr(cfg, "split", False):  # the split's epoch: timers move under their part's start
        timers.rehome(txn, cache.data, owned, k, changes.set)
    if getattr(cfg, "merged_from", None):  # the merge's epoch: timers move under the merged bin's start
        timers.rehome_merged(txn, cache.data, owned, k, cfg.merged_from, changes.set)
    rt = _Runtime(op, cfg.clock, changes, writer, cfg.input_topic)
    if shadow_op is not None:
        rt.shadow = Shadow(shadow_op, op.spec.time_mode, rt.tv, tuple(getattr(cfg, "shadow_fields", ())))
    spec, ts_cols = op.spec, tuple(cfg.op_conf.get("ts_columns", ()))
    et_col = spec.event_time_column if spec.time_mode == "EventTime" else None
    dead = late = fired = 0
    max_et: int | None = None
    bin_records: dict[int, int] = {}
    bin_ns: dict[int, int] = {}  # per bin, the wall time of its keys' handling (placement's weight)
    clock, topics = time.perf_counter_ns, input_topics(cfg.input_topic)
    hos = TaskHandovers(roles := roles or {}, txn, cache.data, k, cfg.clock.epoch, rt.tv.getCurrentWatermarkInMs(),
                        changes.set, owned, spec.window)
    if n:  # rows `keyed` rejected, or without a key: dead letters before any handler runs
        fresh = {b for b, (r, _) in roles.items() if r == "new"}  # the old owner writes their dead letters
        table, rejected = split_rejected(without_fresh_rejects(table, fresh), topics)
        for rk, rv, why in rejected:
            writer.add_output(DEAD_LETTER, rk, rv, why)
        dead, n = len(rejected), table.num_rows
        late = sum(json.loads(why).get("reason") == LATE for *_, why in rejected)  # a pre-aggregate's, from the JVM
    if n:
        # the value breaks the last ties (rows of one record a `keyed` flatMap made): the order a
        # handler sees never depends on the order the routing shuffle delivered the rows in
        table = table.sort_by([("h", "ascending"), ("key", "ascending"), ("partition", "ascending"),
                               ("offset", "ascending"), ("value", "ascending")])
        cols = {c: table.column(c).to_pylist() for c in ("h", "bin", "key", "value", "partition", "offset")}
        i = 0
        while i < n:
            t0 = clock()
            j = i
            while j < n and cols["key"][j] == cols["key"][i] and cols["h"][j] == cols["h"][i]:
                j += 1
            key, b = cols["key"][i], cols["bin"][i]
            bin_records[b] = bin_records.get(b, 0) + (j - i)
            ho, from_ms, until_ms = hos.bounds(b, key)  # ho: a fresh bin's (no dead letters); the rows it folds
            rows, dl, ets = [], [], []  # the key's rows, (value, source) of each for its dead letter, event times
            for r in range(i, j):
                value, where = cols["value"][r], source_of(topics, cols["partition"][r], cols["offset"][r])
                try:
                    d, et = decode_row(value, ts_cols, et_col)
                    if ho is not None and (et is None or et < from_ms or et < rt.tv.getCurrentWatermarkInMs()
                                           or (spec.max_ahead_ms is not None and et > rt.now + spec.max_ahead_ms)):
                        continue
                except RowRejected as exc:
                    if ho is not None:
                        continue
                    dead += 1
                    writer.add_output(DEAD_LETTER, key, value, dead_note(exc.reason, *where, str(exc)))
                    continue
                if et is not None:
                    if spec.max_ahead_ms is not None and et > rt.now + spec.max_ahead_ms:
                        dead += 1
                        writer.add_output(DEAD_LETTER, key, value, dead_note(
                            AHEAD, *where, f"event time {et} ms is more than max_ahead_ms {spec.max_ahead_ms} ms "
                            f"ahead of the epoch's processing time {rt.now} ms (a producer's clock or unit is off)"))
                        continue
                    max_et = et if max_et is None else max(max_et, et)
                    if et < rt.tv.getCurrentWatermarkInMs():
                        late += 1
                        dead += 1
                        writer.add_output(DEAD_LETTER, key, value, dead_note(
                            LATE, *where, f"event time {et} ms is below the epoch's watermark "
                            f"{rt.tv.getCurrentWatermarkInMs()} ms (raise QuerySpec.lateness_ms to accept it)"))
                        continue
                    if et >= until_ms:  # an old owner's windows end by the key's boundary: not its row
                        continue
                rows.append(Row(**d))
                dl.append((value, where))  # its dead letter's note only if the handler fails
                ets += [] if et is None else [et]
            i = j
            if rows:
                gk = tuple(json.loads(key).values())
                sk = store_key(int(cols["h"][i - 1]), key)
                hos.rows(b, sk, key, ets)  # a session handover's tracker (before the handler: failing or not)
                dead += rt.call(b, sk, key, lambda h, gk=gk, rows=rows: h.on_rows(gk, iter(rows), h.tv),
                                row_letters(dl if ho is None else []))
            bin_ns[b] = bin_ns.get(b, 0) + clock() - t0
    due = cfg.clock.due(spec.time_mode)
    for b in sorted(owned):
        if due is not None:
            for ts, sk, key in list(timers.scan(txn, cache.data, b, k, timers.USER, due)):
                gk = tuple(json.loads(key).values())
                raw = txn.get(sk, db=cache.data)
                ks = KeyState(decode_value(sk, raw, key) if raw is not None else None)
                ks.timers.discard(ts)  # fires once: gone from the key's state and the index in this commit
                changes.set(b, timers.index_key(sk, k, timers.USER, ts), None)
                blob = ks.to_bytes()
                changes.set(b, sk, encode_value(sk, key, blob) if blob is not None else None)
                fired += 1
                emit = hos.keeps(b, sk, ts, key)  # in a handover: is this timer's output this owner's?
                dead += rt.call(b, sk, key, lambda h, gk=gk, ts=ts: h.on_timer(gk, h.tv, ExpiredTimerInfo(ts)),
                                timer_letter(ts, cfg.input_topic) if emit else lambda: [], emit)
        for ts, sk, key in list(timers.scan(txn, cache.data, b, k, timers.TTL, rt.now)):
            ks_before, raw = rt.load(sk, key)
            rt.save(b, sk, key, KeyState(raw), ks_before)  # compact at `now`: expired values go
            if txn.get(timers.index_key(sk, k, timers.TTL, ts), db=cache.data) is not None:  # stale entry
                changes.set(b, timers.index_key(sk, k, timers.TTL, ts), None)
    if callable(close := getattr(rt.proc, "close", None)):
        close()
    ho_open = hos.finish()  # a session handover's keys still open, per bin the new owner holds
    counters = changes.finish(cache, writer)
    extra = {"max_event_ms": max_et, "late_rows": late, "timers_fired": fired,
             "next_timer_ms": hos.next_due(timers.first_due(txn, cache.data, sorted(owned), k, timers.USER)),
             **({"handover_open": ho_open} if ho_open else {}),
             "next_expiry_ms": timers.first_due(txn, cache.data, sorted(owned), k, timers.TTL),
             **({"shadow": rt.shadow.tally()} if rt.shadow is not None else {})}
    return dead, {b: (rec, counters.get(b), bin_ns.get(b, 0) // 1000) for b, rec in bin_records.items()}, extra
