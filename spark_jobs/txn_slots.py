"""A worker slot's transactional identity (its id, its marker, what a task needs to write) and the
Kafka clients this process keeps for it: one producer per slot, made ahead of a commit (`prepare`),
initialised at its first commit (which fences every earlier producer of the id), replaced when a
neighbour process took the slot; and one read_committed consumer for marker reads.
The protocol that uses them is spark_jobs.txn_output's."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.serializer import Serializer

log = logging.getLogger("ballast.txn_output")

#: a task killed inside its transaction holds back read_committed readers of the partitions it
#: wrote until the slot's next producer (the epoch's replay) aborts it, or this long at most
TRANSACTION_TIMEOUT_MS = 60_000

def transactional_id(job: str, operator: str, worker: int) -> str:
    """The Kafka transactional id of worker slot `worker` of `operator` in `job`."""
    return f"ballast.{job}.{operator}.w{worker}"


@dataclass(frozen=True, order=True)
class Marker:
    """A committed (epoch, worker) of one durable store: its outputs are visible to read_committed."""

    store: str
    epoch: int
    worker: int

    def key(self) -> bytes:
        return b"w%d" % self.worker

    def value(self) -> bytes:
        return json.dumps({"store": self.store, "epoch": self.epoch, "worker": self.worker},
                          sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Marker | None:
        """A marker from its value; None for anything else (a tombstone, another format)."""
        if not raw:
            return None
        try:
            d = json.loads(raw)
            return cls(str(d["store"]), int(d["epoch"]), int(d["worker"]))
        except (ValueError, KeyError, TypeError):
            return None

    def covers(self, store: str, epoch: int) -> bool:
        """Whether this being the slot's last marker means (epoch, this worker) is committed."""
        return self.store == store and self.epoch >= epoch


@dataclass(frozen=True)
class TxnTarget:
    """What a task needs to write its outputs transactionally; built by the driver, shipped with the closure."""

    bootstrap: str
    job: str
    operator: str
    store_id: str
    commits_topic: str
    client_kwargs: dict[str, Any] = field(default_factory=dict)  # SASL/TLS (ballast.kafka_security)
    outage_s: float = 300.0  # how long a task keeps trying through broker errors and fencing
    max_request_size: int = 16 * 1024 * 1024 + 65536


#: clients' back-off between retries: kafka-python's 100 ms default costs ~200 ms per init_transactions
RETRY_BACKOFF_MS = 20


#: stands for a null key in a record that has no value either (see _NullableKey)
NULL_KEY = object()


class _NullableKey(Serializer):
    """kafka-python's `send` refuses a record whose key and value are both None, which Kafka itself
    takes (Spark's sink writes them): the dead letter of such a record, or of one too large to
    carry its payload. `send` checks the key before serializing it, so NULL_KEY passes the check
    and is serialized to a null key here; bytes keys pass through unchanged."""

    def serialize(self, topic: str, headers: Any, data: Any) -> bytes | None:
        return None if data is NULL_KEY else data


class _Slot:
    """A process's producer for one transactional id and the last marker it knows for the slot."""

    def __init__(self, t: TxnTarget, worker: int, topics: Iterable[str] = ()) -> None:
        self.tid = transactional_id(t.job, t.operator, worker)
        self.timeout_s = _timeout_ms(t) / 1000  # what a flush or a commit may wait for the broker
        prepared = _take_prepared(self.tid)  # its metadata is on the way already (`prepare`)
        self.producer = prepared or _producer(t, self.tid)
        self.last: Marker | None = None
        self.pid = os.getpid()
        self.token = f"{self.pid}:{uuid.uuid4().hex}"
        try:
            if prepared is None:
                _request_metadata(self.producer, {t.commits_topic, *topics})
            self.producer.init_transactions()  # fences every earlier producer of the id
            _owner_file(self.tid).write_text(self.token)
            self.last = read_last_marker(t, worker)
        except BaseException:
            self.close()
            raise

    def superseded(self) -> bool:
        """Another process on this host initialised the id since (it fenced this producer): a hint
        that saves a transaction the broker would refuse. Other hosts' producers are found by that refusal."""
        try:
            return _owner_file(self.tid).read_text() != self.token
        except OSError:
            return False

    def close(self) -> None:
        _close_quietly(self.producer)


def _timeout_ms(t: TxnTarget) -> int:
    return int(max(min(t.outage_s, 120.0), 10.0) * 1000)


def _producer(t: TxnTarget, tid: str) -> Any:
    """A transactional producer for `tid`, not yet initialised (its init fences the id's earlier producers)."""
    from kafka import KafkaProducer

    timeout_ms = _timeout_ms(t)
    return KafkaProducer(
        bootstrap_servers=t.bootstrap, transactional_id=tid, acks="all",
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, linger_ms=5, batch_size=512 * 1024,
        max_request_size=t.max_request_size, max_block_ms=timeout_ms, request_timeout_ms=min(timeout_ms, 30000),
        # a new producer's first metadata waits no longer than a flush: kafka-python's 30 s would come on
        # top of an outage budget already spent (a 15 s budget failed the query 46 s into the outage)
        bootstrap_timeout_ms=timeout_ms,
        retry_backoff_ms=RETRY_BACKOFF_MS, key_serializer=_NullableKey(), **t.client_kwargs)


def prepare(t: TxnTarget, worker: int, topics: Iterable[str]) -> None:
    """At a task's start, when this process holds no live slot for `worker`: a producer for it, made
    in a background thread (a broker away must not hold a task that may have nothing to commit), not
    initialised, with its topics' metadata requested, so that a commit at the task's end pays only
    the init and the marker read. Spark's Python workers take tasks in no fixed order, so a slot's
    tasks move between a host's processes and each move needs a new producer (Q7: about every
    second epoch). Nothing is fenced here: the init stays where it was, at the first commit. A
    failure only loses the head start (logged); the commit makes its own producer."""
    tid = transactional_id(t.job, t.operator, worker)
    pid = os.getpid()
    with _lock:
        if _holds(tid, pid) or _prepared.get(tid, (None,))[0] == pid or _preparing.get(tid, (None,))[0] == pid:
            return  # (an entry of another pid was inherited by a fork: its thread is not in this process)
        th = threading.Thread(target=_build, args=(t, tid, tuple(topics), pid), daemon=True,
                              name=f"ballast-prepare-{tid}")
        _preparing[tid] = (pid, th)
    th.start()


def _build(t: TxnTarget, tid: str, topics: tuple[str, ...], pid: int) -> None:
    """`prepare`'s thread: the producer, kept unless the slot's commit made its own meanwhile."""
    p: Any = None
    try:
        p = _producer(t, tid)
        _request_metadata(p, {t.commits_topic, *topics})
    except Exception:  # noqa: BLE001 - a head start, never a task's failure
        log.debug("preparing the transactional producer of %s failed; the commit makes its own", tid, exc_info=True)
    with _lock:
        _preparing.pop(tid, None)
        keep = p is not None and not _holds(tid, pid)
        if keep:
            _prepared[tid] = (pid, p)
            stats["prepared"] += 1
    if p is not None and not keep:
        _close_quietly(p)


def _holds(tid: str, pid: int) -> bool:
    """Whether process `pid` holds a live slot for `tid` (no neighbour took it since)."""
    s = _slots.get(tid)
    return s is not None and s.pid == pid and not s.superseded()


def _take_prepared(tid: str) -> Any:
    """This process's prepared producer for `tid` (`prepare`), handed over once; None if there is
    none (or it is still being made: the commit does not wait for it)."""
    with _lock:
        pid, p = _prepared.pop(tid, (None, None))
    if p is not None and pid != os.getpid():  # inherited by a fork: its threads are not in this process
        return None
    return p


def _close_quietly(p: Any) -> None:
    """Closes a producer without waiting; one that cannot say goodbye is gone all the same."""
    try:
        p.close(timeout=0)
    except Exception:  # noqa: BLE001 - closing a client that was never used
        pass


def _request_metadata(p: Any, topics: Iterable[str]) -> None:
    """Ask for the metadata of every topic the slot will write to, in one request that runs while
    init_transactions and the marker read wait for the broker. kafka-python fetches a topic's metadata
    on its first `send`, one topic per request and ~100 ms each: a new slot's first transaction spent
    ~150 of its ~210 ms there (Q7, 2026-11-30). The calls are what kafka-python's own `send` makes
    (`_wait_on_metadata`, pinned version in constraints.txt); tests/spark_jobs/test_txn_slots.py
    fails loudly if an upgrade renames them."""
    for topic in sorted(topics):
        p._sender.add_topic(topic)
    p._metadata.request_update()
    p._sender.wakeup()


def _owner_file(tid: str) -> Path:
    d = Path(tempfile.gettempdir()) / "ballast-txn"
    d.mkdir(exist_ok=True)
    return d / tid


_slots: dict[str, _Slot] = {}  # transactional id -> this process's producer (Python workers are reused)
_prepared: dict[str, tuple[int, Any]] = {}  # transactional id -> (pid, a producer `prepare` made, not initialised)
_preparing: dict[str, tuple[int, threading.Thread]] = {}  # transactional id -> (pid, the thread making one)
_lock = threading.Lock()  # _prepared and _preparing, between a task and its prepare thread
_consumers: dict[tuple[str, str], Any] = {}  # (pid, bootstrap) -> a read_committed consumer for marker reads
stats: dict[str, int] = {"inits": 0, "commits": 0, "skips": 0, "retries": 0, "prepared": 0}


def _marker_consumer(t: TxnTarget) -> Any:
    """This process's read_committed consumer (its first request pays the connection, ~100 ms)."""
    from kafka import KafkaConsumer

    key = (str(os.getpid()), t.bootstrap)
    c = _consumers.get(key)
    if c is None:
        c = _consumers[key] = KafkaConsumer(bootstrap_servers=t.bootstrap, enable_auto_commit=False, group_id=None,
                                            isolation_level="read_committed", retry_backoff_ms=RETRY_BACKOFF_MS,
                                            **t.client_kwargs)
    return c


def read_last_marker(t: TxnTarget, worker: int, timeout_s: float = 30.0) -> Marker | None:
    """The last committed marker on partition `worker` of the marker topic (read_committed), None
    if there is none. Reads a window before the end, widened while it holds no committed marker
    (aborted attempts leave records only a read_uncommitted reader sees). Called after the slot's
    init_transactions (`_Slot`), which completes a transaction of the id that was just committed:
    Kafka writes a commit's markers after the commit call returns, so a read before the init could
    miss a marker of a moment ago."""
    from kafka import TopicPartition

    tp = TopicPartition(t.commits_topic, worker)
    c = _marker_consumer(t)
    try:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        start_offset = c.beginning_offsets([tp])[tp]
        window = 16
        deadline = time.time() + timeout_s
        while True:
            lo = max(start_offset, end - window)
            c.seek(tp, lo)
            last: Marker | None = None
            while c.position(tp) < end:
                if time.time() > deadline:
                    raise TimeoutError(f"reading {t.commits_topic}[{worker}] did not reach offset {end}")
                for msgs in c.poll(timeout_ms=200).values():
                    for msg in msgs:
                        if msg.offset < end:
                            last = Marker.decode(msg.value) or last
            if last is not None or lo <= start_offset:
                return last
            window *= 8
    except BaseException:
        _close_consumer((str(os.getpid()), t.bootstrap))
        raise


def _close_consumer(key: tuple[str, str]) -> None:
    """Forgets and closes one cached marker consumer (a client that cannot say goodbye is gone all the same)."""
    c = _consumers.pop(key, None)
    if c is None:
        return
    try:
        c.close()
    except Exception:  # noqa: BLE001 - see above
        log.debug("closing a marker consumer failed", exc_info=True)


def slot(t: TxnTarget, worker: int, topics: Iterable[str] = ()) -> _Slot:
    tid = transactional_id(t.job, t.operator, worker)
    s = _slots.get(tid)
    if s is not None and not _holds(tid, os.getpid()):  # forked, or fenced by a neighbour
        drop(tid)
        s = None
    if s is None:
        s = _slots[tid] = _Slot(t, worker, topics)
        stats["inits"] += 1
    return s


def drop(worker_tid: str) -> None:
    s = _slots.pop(worker_tid, None)
    if s is not None:
        s.close()


def close_clients() -> None:
    """Closes this process's cached producers and marker consumers. A Python worker keeps them for
    its life; a process that runs tasks in-process (the tests) closes them before its broker stops,
    or their background threads log connection errors until the interpreter exits."""
    for tid in list(_slots):
        drop(tid)
    for pid, th in list(_preparing.values()):
        if pid == os.getpid():
            th.join(timeout=60)
    with _lock:
        prepared = list(_prepared.values())
        _prepared.clear()
    for _, p in prepared:
        _close_quietly(p)
    for key in list(_consumers):
        _close_consumer(key)
