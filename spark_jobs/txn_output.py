"""Transactional output: each task of a keyed epoch writes its outputs and dead letters itself, in
one Kafka transaction together with a commit marker, so a `read_committed` consumer sees every
output of the job exactly once, with no deduplication (docs/dataplane.md, "Transactional output").

Per worker slot w of an operator there is one transactional id, `ballast.<job>.<operator>.w<w>`
(`transactional_id`), and one partition, w, of the marker topic `<output topic>.commits`
(`commits_topic`; compacted, written only under that id). A task of epoch e for slot w:

1. gets the slot's producer: a new one calls `init_transactions()`, which fences every earlier
   producer of the id (a zombie or speculative attempt can no longer commit) and completes or
   aborts its open transaction, then reads partition w of the marker topic `read_committed`: the
   last marker is the highest epoch committed for w (markers of one slot are written in epoch
   order: an epoch's tasks start after every task of the epoch before succeeded);
2. if that marker is this store's and its epoch >= e, the outputs of (e, w) are visible already:
   it writes nothing (a replay after a crash between the Kafka commit and the manifest);
3. otherwise, in one transaction: every output and dead letter (the same records, ids and
   headers as `spark_jobs.output.output_records`), plus the marker (store id, e, w) on
   partition w; then, only if every one of those sends was acknowledged, `commit_transaction()`
   (a send that failed, e.g. a batch the client expired, is retried as below: the new producer's
   init aborts the transaction, so a commit never shows the marker with a record missing).

A producer kept from an earlier task of the same Python process skips step 1: while no other
producer has initialised the id, no other producer can have committed for the slot, so what the
process knows (the marker it read or wrote last) is the slot's state; if another one has, the
broker refuses this producer's transaction (fenced), and the task starts again at step 1 with a
new producer. Any error in the transaction is handled the same way (a commit whose outcome is
unknown is found by the marker read), until `outage_s` has passed.

The marker carries the durable store's id: a new deployment under the same job name (a new
checkpoint and store) does not mistake the old deployment's markers for its own.
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.serializer import Serializer

log = logging.getLogger("ballast.txn_output")

#: `--output-mode`: keyed operators' outputs in Kafka transactions (the default), or written by
#: Spark's Kafka sink (at least once; consumers deduplicate by `ballast-id`)
TRANSACTIONAL = "transactional"
AT_LEAST_ONCE = "at-least-once"
OUTPUT_MODES = (TRANSACTIONAL, AT_LEAST_ONCE)
#: partitions of a new marker topic; the driver adds partitions when an epoch has more task slots
COMMITS_PARTITIONS = 8
#: a task killed inside its transaction holds back read_committed readers of the partitions it
#: wrote until the slot's next producer (the epoch's replay) aborts it, or this long at most
TRANSACTION_TIMEOUT_MS = 60_000

Record = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]  # topic, key, value, headers


def transactional_id(job: str, operator: str, worker: int) -> str:
    """The Kafka transactional id of worker slot `worker` of `operator` in `job`."""
    return f"ballast.{job}.{operator}.w{worker}"


def commits_topic(output_topic: str) -> str:
    """The marker topic of an operator's output topic (`<job>.output.commits`)."""
    return f"{output_topic}.commits"


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

    def __init__(self, t: TxnTarget, worker: int) -> None:
        from kafka import KafkaProducer

        self.tid = transactional_id(t.job, t.operator, worker)
        timeout_ms = int(max(min(t.outage_s, 120.0), 10.0) * 1000)
        self.timeout_s = timeout_ms / 1000  # what a flush or a commit may wait for the broker
        self.producer = KafkaProducer(
            bootstrap_servers=t.bootstrap, transactional_id=self.tid, acks="all",
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, linger_ms=5, batch_size=512 * 1024,
            max_request_size=t.max_request_size, max_block_ms=timeout_ms, request_timeout_ms=min(timeout_ms, 30000),
            # a new producer's first metadata waits no longer than a flush: kafka-python's 30 s would come on
            # top of an outage budget already spent (a 15 s budget failed the query 46 s into the outage)
            bootstrap_timeout_ms=timeout_ms,
            retry_backoff_ms=RETRY_BACKOFF_MS, key_serializer=_NullableKey(), **t.client_kwargs)
        self.last: Marker | None = None
        self.pid = os.getpid()
        self.token = f"{self.pid}:{uuid.uuid4().hex}"
        try:
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
        try:
            self.producer.close(timeout=0)
        except Exception:
            pass


def _owner_file(tid: str) -> Path:
    d = Path(tempfile.gettempdir()) / "ballast-txn"
    d.mkdir(exist_ok=True)
    return d / tid


_slots: dict[str, _Slot] = {}  # transactional id -> this process's producer (Python workers are reused)
_consumers: dict[tuple[str, str], Any] = {}  # (pid, bootstrap) -> a read_committed consumer for marker reads
stats: dict[str, int] = {"inits": 0, "commits": 0, "skips": 0, "retries": 0}


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


def _slot(t: TxnTarget, worker: int) -> _Slot:
    tid = transactional_id(t.job, t.operator, worker)
    s = _slots.get(tid)
    if s is not None and (s.pid != os.getpid() or s.superseded()):  # forked, or fenced by a neighbour
        _drop(tid)
        s = None
    if s is None:
        s = _slots[tid] = _Slot(t, worker)
        stats["inits"] += 1
    return s


def _drop(worker_tid: str) -> None:
    s = _slots.pop(worker_tid, None)
    if s is not None:
        s.close()


def close_clients() -> None:
    """Closes this process's cached producers and marker consumers. A Python worker keeps them for
    its life; a process that runs tasks in-process (the tests) closes them before its broker stops,
    or their background threads log connection errors until the interpreter exits."""
    for tid in list(_slots):
        _drop(tid)
    for key in list(_consumers):
        _close_consumer(key)


def commit_outputs(t: TxnTarget, epoch: int, worker: int, records: list[Record]) -> bool:
    """Make `records` (the outputs and dead letters of (epoch, worker)) visible to read_committed
    consumers exactly once. True if this call committed them, False if an earlier attempt had."""
    from kafka.errors import AuthorizationError, KafkaConfigurationError

    from spark_jobs import faults

    if not records:  # nothing to show: no transaction, no marker (a replay has none either)
        return False
    tid = transactional_id(t.job, t.operator, worker)
    deadline: float | None = None  # `outage_s` from the first error on (the budget of a broker outage)
    backoff = 0.2
    was_fenced = False
    while True:
        try:
            s = _slot(t, worker)
            if s.last is not None and s.last.covers(t.store_id, epoch):
                stats["skips"] += 1
                if was_fenced:  # a zombie (or a losing copy): the one line that says its late commit was refused
                    log.warning("transactional output of epoch %d worker %d: this attempt was fenced and another "
                                "attempt committed the epoch; its %d records stay aborted", epoch, worker, len(records))
                return False
            p = s.producer
            p.begin_transaction()
            sent = [p.send(topic, key=NULL_KEY if key is None and value is None else key, value=value,
                           headers=headers) for topic, key, value, headers in records]
            mark = Marker(t.store_id, epoch, worker)
            sent.append(p.send(t.commits_topic, key=mark.key(), value=mark.value(), partition=worker))
            p.flush(timeout=s.timeout_s)
            for f in sent:  # kafka-python (3.0) fails an expired batch, or one lost to a producer-epoch bump,
                f.get(timeout=0)  # without aborting the transaction: a commit now would show the marker, not them
            faults.hit("worker_before_output_commit")  # records in the log, the transaction open
            _commit(p, s.timeout_s)
            s.last = mark
            stats["commits"] += 1
            break
        except (AuthorizationError, KafkaConfigurationError):
            _drop(tid)
            raise
        except Exception as exc:  # fenced, broker away, a commit of unknown outcome: new producer, read again
            _drop(tid)
            stats["retries"] += 1
            fenced = is_fenced(exc)
            was_fenced = was_fenced or fenced
            if deadline is None:
                deadline = time.time() + t.outage_s
            elif time.time() + backoff > deadline:
                raise
            (log.info if fenced else log.warning)(
                "transactional output of epoch %d worker %d: %s: %s; retrying with a new producer",
                epoch, worker, type(exc).__name__, exc)
            # fenced: another producer took the slot, a new one reads its marker now (after a random
            # moment: two live attempts, e.g. a speculative copy, must not keep fencing each other)
            time.sleep(random.uniform(0.0, 0.1) if fenced else backoff)
            if not fenced:
                backoff = min(backoff * 2, 5.0)
    faults.hit("worker_after_output_commit")
    return True


def _commit(p: Any, timeout_s: float) -> None:
    """`commit_transaction`, bounded. kafka-python's waits for the coordinator's answer without a
    limit, and so does its `flush()` without a timeout: a broker that went away during either held
    the Python worker, and with it the Spark task and its executor slot, for good (a test's session
    then could not run its next job). A timeout raises KafkaTimeoutError, which the caller retries
    with a new producer until its outage budget is spent, like any broker error."""
    from kafka.errors import KafkaTimeoutError

    # what commit_transaction does in the pinned kafka-python (constraints.txt), with a bounded wait;
    # an upgrade that renames these fails here loudly instead of waiting without a limit again
    result = p._transaction_manager.begin_commit()
    p._sender.wakeup()
    if not result.wait(timeout_ms=timeout_s * 1000):
        raise KafkaTimeoutError(f"the transaction's commit was not answered within {timeout_s:.0f} s")


def is_fenced(exc: BaseException) -> bool:
    """Whether a transactional call failed because a newer producer of the id exists (kafka-python
    raises ProducerFencedError, or wraps it in a KafkaError's message)."""
    text = f"{type(exc).__name__} {exc!r}"
    return "ProducerFenced" in text or "InvalidProducerEpoch" in text


def ensure_commit_partitions(bootstrap: str, topic: str, partitions: int, client_kwargs: dict[str, Any]) -> int:
    """Give the marker topic at least `partitions` partitions (one per task slot); returns a count it
    has at least (the metadata of a topic created a moment ago can still list only some of its
    partitions: the caller asks again when an epoch needs more)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions
    from kafka.errors import InvalidPartitionsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, retry_backoff_ms=RETRY_BACKOFF_MS, **client_kwargs)
    try:
        have = len(admin.describe_topics([topic])[0]["partitions"])
        if have < partitions:
            try:
                admin.create_partitions({topic: NewPartitions(total_count=partitions)})
            except InvalidPartitionsError:  # a racing driver added them
                pass
            have = partitions
        return have
    finally:
        admin.close()
