"""What one worker does in one epoch: the function `mapInArrow` runs for each routed partition.

Partition p *is* worker p (`repartitionById(W, worker)`); the task may run on any executor, in any
Python worker process, possibly twice (task retries, speculation, a zombie on a lost executor).
It never trusts local files it did not check:

1. If some attempt already wrote the durable changelog object of (epoch, worker), the epoch is
   done for this worker: re-emit that object's outputs (same ids, same values) and stop.
2. Otherwise, in ONE write transaction of the worker's local cache (spark_jobs.cache; one that
   fails — full disk, corrupt files, deleted — is rebuilt, spark_jobs.cache_fallback):
   * drop the bins it no longer owns (a move out is just that: the new owner reads the durable
     state), keep warm bins of pre-copy steps;
   * bring every owned and warm bin to the state after epoch e-1 — nothing to do when the cache
     is current; replay the bin's changelog batches since its cache epoch (a pre-copied bin at
     its cut-over, a cache that missed epochs); or load it from the durable state (a bin that
     moved in, a new or lost executor): spark_jobs.worker_bins;
   * fold the rows (sorted by hash, key, Kafka partition, offset: deterministic), recording
     every state change by bin; a record without a key or whose fold raises goes to the
     dead-letter topic with its reason (spark_jobs.records);
   * write the changelog object (durable, write-once, named by this attempt) — and a snapshot
     object when the driver asked for one — and only then commit the cache.
   The commit is conditional by construction: whatever the cache held, the result is the durable
   state of e-1 plus this epoch's rows, so two attempts of one epoch write identical objects and
   a late attempt of e-1 cannot move anything back (it finds e-1's object and only re-emits).
Outputs are yielded after that, with the id `epoch:worker:seq` in a header, as rows the same task
writes in the JVM: in one Kafka transaction with the slot's commit marker (transactional output,
the default: spark_jobs.txn_output; a slot whose marker already covers the epoch writes nothing),
or by Spark's Kafka sink (`--output-mode at-least-once`).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from spark_jobs import handover
from spark_jobs.history import History
from spark_jobs.objects import DEAD_LETTER, OUTPUT
from spark_jobs.output import kafka_rows
from spark_jobs.records import (
    OPERATOR_ERROR,
    dead_note,
    error_text,
    input_topics,
    source_of,
    split_rejected,
)
from spark_jobs.worker_bins import owned_bins, prepare_bins


@dataclass(frozen=True)
class ApplyConfig:
    """Everything a task needs; built by the driver per epoch and shipped with the closure."""

    epoch: int
    job: str
    operator: str
    bins_bits: int  # k of the epoch's map (split steps raise it)
    workers: int
    assignment: tuple[int, ...]
    state_uri: str
    store_id: str
    history: History
    output_topic: str
    dlq_topic: str
    input_topic: str = ""
    cache_dir: str | None = None
    snapshot: bool = False
    warm: dict[int, tuple[int, ...]] = field(default_factory=dict)  # worker -> bins to pre-copy
    moving_in: dict[int, tuple[int, ...]] = field(default_factory=dict)  # worker -> bins cut over now
    clock: Any = None  # processors: the epoch's spark_jobs.timers.EpochClock (same on replay)
    op_conf: dict[str, Any] = field(default_factory=dict)  # processors: ProcessorOperator.task_conf()
    base_bits: int | None = None  # k of the job's first map (`--bins`): the k of a cache that never recorded one
    split: bool = False  # this epoch applies a split (k rose): processors re-file their timer index
    merged_from: int | None = None  # this epoch applies a merge: the k before it (processors re-file too)
    # after an upgrade step: the job's processor versions, (version, ref) from the command line's on;
    # the last runs (spark_jobs.operator_loader.live_operator). Empty: `operator` as it was started
    code: tuple[tuple[str, str], ...] = ()
    # a shadow upgrade (spark_jobs.shadow): the versions with the one tried last, and the fields compared
    shadow: tuple[tuple[str, str], ...] = ()
    shadow_fields: tuple[str, ...] = ()
    # an upgrade's check (spark_jobs.live_code): the versions every task imports, reported in its metrics
    probe: tuple[tuple[str, str], ...] = ()
    # bins in a handover this epoch (spark_jobs.handover): rows to both owners, a fresh bin at the new one
    handover: tuple[Any, ...] = ()


#: the Spark local property that carries an epoch's ApplyConfig to its tasks: set by the driver
#: around the epoch's job (spark_jobs.epoch_apply), read by `apply_task`
APPLY_PROPERTY = "ballast.apply"


def encode_config(cfg: ApplyConfig) -> str:
    """`cfg` as `APPLY_PROPERTY`'s text: cloudpickle (what a closure would ship), base64."""
    import base64

    from pyspark import cloudpickle

    return base64.b64encode(cloudpickle.dumps(cfg)).decode("ascii")


def apply_task(batches: Iterator[Any]) -> Iterator[Any]:
    """The epoch's task, one function for the job's whole life: its ApplyConfig comes with the task
    (the local property `APPLY_PROPERTY`, which Spark ships with every task of the epoch's job and
    of its retries), not inside the function. Why: a function made per epoch is a new Python UDF
    the driver pickles and registers in every epoch (~40 Py4J calls); this one is registered once
    (spark_jobs.routing.map_in_arrow)."""
    import base64
    import pickle

    from pyspark import TaskContext

    ctx = TaskContext.get()
    text = ctx.getLocalProperty(APPLY_PROPERTY) if ctx is not None else None
    if not text:
        raise RuntimeError(f"an epoch task without its configuration (Spark local property {APPLY_PROPERTY!r}): "
                           "its job was started outside the epoch (spark_jobs.epoch_apply sets it)")
    yield from make_apply_fn(pickle.loads(base64.b64decode(text)))(batches)


apply_task.static_task = True  # type: ignore[attr-defined]  # spark_jobs.routing.map_in_arrow makes its UDF once


def make_apply_fn(cfg: ApplyConfig) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def apply_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from spark_jobs.cache import default_cache_root
        from spark_jobs.cache_fallback import run_cached
        from spark_jobs.objects import new_attempt_id

        t_task, w_task = time.perf_counter(), time.time()
        ctx = TaskContext.get()
        worker = ctx.partitionId()  # type: ignore[union-attr]
        rbs = list(batches)  # waiting on the shuffle: not useful time
        table = pa.Table.from_batches(rbs) if rbs else None
        t_useful, w_useful = time.perf_counter(), time.time()
        n = table.num_rows if table is not None else 0
        if table is not None and n and not pc.all(pc.equal(table.column("worker"), worker)).as_py():
            raise RuntimeError(f"routing bug: a row for another worker reached worker {worker} at epoch {cfg.epoch}")
        outputs = _done_outputs(cfg, worker)
        if outputs is None:  # else an earlier attempt finished this epoch: its outputs, nothing else
            attempt = new_attempt_id(ctx.stageId(), ctx.attemptNumber())  # type: ignore[union-attr]
            # a failing cache is rebuilt (spark_jobs.cache_fallback), never the end of the query
            outputs = run_cached(
                cfg.cache_dir or default_cache_root(cfg.job), cfg.store_id, cfg.job, worker, cfg.epoch,
                lambda cache, txn, note: _run(cfg, cache, txn, worker, table, n, attempt, t_task, t_useful, note,
                                              walls=(w_task, w_useful)),
                lambda: _done_outputs(cfg, worker))
        if outputs:
            yield kafka_rows(cfg.epoch, worker, outputs, cfg.output_topic, cfg.dlq_topic)

    return apply_partition


def _done_outputs(cfg: ApplyConfig, worker: int) -> list[tuple[int, bytes, bytes, str | None]] | None:
    """The outputs of the epoch's changelog object for `worker`, if some attempt wrote it."""
    from spark_jobs.durable import find_object
    from spark_jobs.objects import ObjectReader

    done = find_object(cfg.state_uri, "changelog", cfg.epoch, worker)
    if done is None:
        return None
    r = ObjectReader(done)
    try:
        return r.outputs()
    finally:
        r.close()


def _run(cfg: ApplyConfig, cache: Any, txn: Any, worker: int, table: Any, n: int, attempt: str,
         t_task: float, t_useful: float, cache_note: dict[str, Any] | None = None,
         walls: tuple[float, float] = (0.0, 0.0)) -> list[tuple[int, bytes, bytes, str | None]]:
    """One worker's epoch in one cache transaction. `walls`: the task's start and the end of its
    input read on the wall clock, for the epoch's trace (`spans` in its metrics)."""
    from spark_jobs import faults
    from spark_jobs.durable import BinSource
    from spark_jobs.objects import ObjectWriter, epoch_name, object_name
    from spark_jobs.storage import Location

    e, k = cfg.epoch, cfg.bins_bits
    owned = set(owned_bins(cfg.assignment, worker))
    warm = set(cfg.warm.get(worker, ())) - owned
    incoming = set(cfg.moving_in.get(worker, ()))
    roles = handover.roles(cfg.handover, worker)
    fresh = {b for b, (r, _) in roles.items() if r == "new"}  # the new owner's fresh bins (spark_jobs.handover)
    held = owned | fresh
    src = BinSource(cfg.history, k, handover.overrides(cfg.handover, worker))
    try:
        cache.ensure_bits(txn, k, k if cfg.base_bits is None else cfg.base_bits)
        moved, warmed = prepare_bins(cache, txn, src, held, warm, incoming, e - 1, k,
                                     {h.bin for h in cfg.handover if h.completes})
        w_prepared = time.time()
        faults.hit("worker_mid_move" if moved else "worker_prepared")
        writer = ObjectWriter(meta={"epoch": e, "worker": worker, "attempt": attempt, "kind": "changelog"})
        extra: dict[str, Any] = {}
        checked: dict[str, str] = {}
        if cfg.probe:  # an upgrade's check: does the version import in this Python worker?
            from spark_jobs.operator_loader import probe

            checked["probe"] = probe(cfg.operator, cfg.probe)
        if cfg.clock is not None:  # a stateful processor: typed state, timers, event time
            from spark_jobs.operator_loader import live_operator
            from spark_jobs.processing import run_processor

            shadow_op = live_operator(cfg.operator, cfg.shadow) if cfg.shadow else None  # a version tried beside
            dead, per_bin, extra = run_processor(cfg, cache, txn, table, n, held, writer,
                                                 live_operator(cfg.operator, cfg.code), shadow_op, roles)  # type: ignore[arg-type]
            if fresh:  # a fresh bin's rows are the old owner's bin's too: the bin's metrics stay the owner's
                extra["fresh_rows"] = sum(per_bin.pop(b)[0] for b in fresh if b in per_bin)
            bin_records = BinRecords.of(per_bin)
        else:
            dead, bin_records = fold_rows(cfg, cache, txn, table, n, writer)
        now, w_folded = time.perf_counter(), time.time()
        tot_keys, tot_bytes = cache.totals(txn)
        bins = bin_records.metrics(cache, txn)
        writer.meta["metrics"] = {
            "worker": worker, "records_in": n, "records_out": len(writer.outputs) - dead, "dead_letters": dead,
            "useful_ms": (now - t_useful) * 1000, "wall_ms": (now - t_task) * 1000,
            "state_keys": tot_keys, "state_bytes": tot_bytes, "bins": bins, "moved_in": moved, "warmed": warmed,
            "host": socket.gethostname(), "pid": os.getpid(), "attempt": attempt,
            # the task's phases on the wall clock, µs (spark_jobs.epoch_trace): input read, bins
            # brought up to date (moves, pre-copies), fold
            "spans": [["read", _us(walls[0]), _us(walls[1])], ["prepare", _us(walls[1]), _us(w_prepared)],
                      ["fold", _us(w_prepared), _us(w_folded)]],
            **extra, **checked,
        }
        if cache_note is not None:  # the epoch ran on a rebuilt cache: the driver records an event
            writer.meta["metrics"]["cache"] = cache_note
        root = Location.of(cfg.state_uri)
        if cfg.snapshot:
            snap = ObjectWriter(meta={"epoch": e, "worker": worker, "attempt": attempt, "kind": "snapshot"})
            snap.add_bins(*cache.export_bins(txn, held, k))
            (root / "snapshot" / epoch_name(e) / object_name(worker, attempt)).write_bytes(snap.to_bytes())
        (root / "changelog" / epoch_name(e) / object_name(worker, attempt)).write_bytes(writer.to_bytes())
        faults.hit("worker_before_commit")
        cache.set_owned(txn, e, held, warm, e - 1)
        return writer.outputs
    finally:
        src.close()


def _us(t: float) -> int:
    return int(t * 1e6)


@dataclass(frozen=True)
class BinRecords:
    """Per bin with records this epoch: how many, and its counters when the epoch changed them."""

    bins: list[int]  # increasing
    records: list[int]
    counters: dict[int, tuple[int, int]]  # bin -> (keys, bytes) after the epoch; absent: unchanged
    fold_us: list[int] = field(default_factory=list)  # per bin, the wall time of its records' fold

    @classmethod
    def empty(cls) -> BinRecords:
        return cls([], [], {})

    @classmethod
    def of(cls, per_bin: dict[int, tuple[int, tuple[int, int] | None, int]]) -> BinRecords:
        """From a {bin: (records, counters or None, fold µs)} map (spark_jobs.processing)."""
        bins = sorted(per_bin)
        return cls(bins, [per_bin[b][0] for b in bins],
                   {b: c for b in bins if (c := per_bin[b][1]) is not None}, [per_bin[b][2] for b in bins])

    def metrics(self, cache: Any, txn: Any) -> dict[str, list[int]]:
        """The task metrics' `bins`: str(bin) -> [records, keys, bytes, fold µs]; one batched
        cache read for the counters the epoch did not change."""
        c = self.counters
        unchanged = [b for b in self.bins if b not in c]
        c = {**c, **dict(zip(unchanged, cache.bin_counters(txn, unchanged)))}
        us = self.fold_us or [0] * len(self.bins)
        return {str(b): [r, *c[b], t] for b, r, t in zip(self.bins, self.records, us)}


def fold_rows(cfg: ApplyConfig, cache: Any, txn: Any, table: Any, n: int,
              writer: Any) -> tuple[int, BinRecords]:
    """Fold the epoch's rows into the cache; changes and outputs go to `writer`. Returns the
    number of dead letters and the records and changed counters of every bin with records.

    The loop is per key (the fold is the user's Python); everything per bin — grouping the
    changes, their counters, the records per bin — is done on arrays after it, so a row costs the
    same whether the epoch's rows fall in one bin or in thousands (issue 13)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.bins import SHORT_KEY_MAX, decode_value, encode_value, store_key
    from spark_jobs.operator_loader import get_operator

    if not n:
        return 0, BinRecords.empty()
    topics = input_topics(cfg.input_topic)
    table, rejected = split_rejected(table, topics)  # before the fold: a null key has no store key
    for rk, rv, why in rejected:
        writer.add_output(DEAD_LETTER, rk, rv, why)
    n = table.num_rows
    if not n:
        return len(rejected), BinRecords.empty()
    op = get_operator(cfg.operator)
    table = table.sort_by([("h", "ascending"), ("key", "ascending"), ("partition", "ascending"),
                           ("offset", "ascending")])
    bin_np = table.column("bin").to_numpy()
    h_np = table.column("h").to_numpy()
    key_col = table.column("key").combine_chunks()
    new_group = np.ones(n, dtype=bool)
    if n > 1:
        same_h = h_np[1:] == h_np[:-1]
        same_k = pc.equal(key_col.slice(1), key_col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        new_group[1:] = ~(same_h & same_k)
    starts = np.flatnonzero(new_group).tolist() + [n]
    # store keys (spark_jobs.bins.store_key) built columnar; the rare long key in Python
    hb = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(8), n, [None, pa.py_buffer(h_np.astype(">u8").tobytes())]).cast(pa.binary())
    sks = pc.binary_join_element_wise(hb, key_col, b"\x00").to_pylist()
    if pc.max(pc.binary_length(key_col)).as_py() > SHORT_KEY_MAX:
        for i, key in enumerate(key_col.to_pylist()):
            if len(key) > SHORT_KEY_MAX:
                sks[i] = store_key(int(h_np[i]), key)
    keys = key_col.to_pylist()
    vals = table.column("value").to_pylist()
    parts = table.column("partition").to_pylist()
    offs = table.column("offset").to_pylist()
    data = cache.data
    get, put, delete = txn.get, txn.put, txn.delete
    ch_rows: list[int] = []  # per changed key: its first row, new stored value (None: deleted), deltas
    ch_vals: list[bytes | None] = []
    ch_dk: list[int] = []
    ch_db: list[int] = []
    dead = len(rejected)
    clock = time.perf_counter_ns
    marks: list[int] = []  # each key's start on the clock, then the loop's end: a key's fold time
    for gi in range(len(starts) - 1):
        marks.append(clock())
        i, j = starts[gi], starts[gi + 1]
        sk, key = sks[i], keys[i]
        raw = get(sk, db=data)
        old = decode_value(sk, raw, key) if raw is not None else None
        try:
            new, outs = op.fold(key, old, vals[i:j])
            for ok, ov in outs:
                writer.add_output(OUTPUT, ok, ov)
        except Exception:  # isolate the poisoned record(s): fold one at a time, dead-letter the failures
            new = old
            for r in range(i, j):
                try:
                    new2, outs = op.fold(key, new, [vals[r]])
                except Exception as exc:
                    dead += 1
                    writer.add_output(DEAD_LETTER, key, vals[r],
                                      dead_note(OPERATOR_ERROR, *source_of(topics, parts[r], offs[r]), error_text(exc)))
                    continue
                new = new2
                for ok, ov in outs:
                    writer.add_output(OUTPUT, ok, ov)
        if new == old:
            continue
        ch_rows.append(i)
        if new is None:
            delete(sk, db=data)
            ch_vals.append(None)
            ch_dk.append(-1)
            ch_db.append(-(len(sk) + len(raw)))
        else:
            stored = encode_value(sk, key, new)
            put(sk, stored, db=data)
            ch_vals.append(stored)
            ch_dk.append(0 if raw is not None else 1)
            ch_db.append(len(stored) - len(raw) if raw is not None else len(sk) + len(stored))
    marks.append(clock())
    counters: dict[int, tuple[int, int]] = {}
    if ch_rows:  # rows are in signed-hash order: a stable sort by bin keeps each bin's fold order
        rows = np.asarray(ch_rows)
        order = np.argsort(bin_np[rows], kind="stable")
        cb = bin_np[rows][order]
        writer.add_bins(cb, [sks[r] for r in rows[order].tolist()], [ch_vals[o] for o in order.tolist()])
        first = np.flatnonzero(np.r_[True, cb[1:] != cb[:-1]])
        dk = np.add.reduceat(np.asarray(ch_dk, dtype=np.int64)[order], first)
        db = np.add.reduceat(np.asarray(ch_db, dtype=np.int64)[order], first)
        moved = (dk != 0) | (db != 0)
        counters = cache.add_bin_counters(txn, dict(zip(cb[first][moved].tolist(),
                                                         zip(dk[moved].tolist(), db[moved].tolist()))))
    ub, recs = np.unique(bin_np, return_counts=True)
    ns = np.bincount(bin_np[np.asarray(starts[:-1])], weights=np.diff(np.asarray(marks, dtype=np.int64)))
    return dead, BinRecords(ub.tolist(), recs.tolist(), counters, (ns[ub] // 1000).astype(np.int64).tolist())
