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

import logging
import random
import time
from typing import Any

from kafka.partitioner.default import murmur2

from spark_jobs.txn_slots import NULL_KEY, RETRY_BACKOFF_MS, Marker, TxnTarget, drop, slot, stats, transactional_id

log = logging.getLogger("ballast.txn_output")

#: `--output-mode`: keyed operators' outputs in Kafka transactions (the default), or written by
#: Spark's Kafka sink (at least once; consumers deduplicate by `ballast-id`)
TRANSACTIONAL = "transactional"
AT_LEAST_ONCE = "at-least-once"
OUTPUT_MODES = (TRANSACTIONAL, AT_LEAST_ONCE)
#: partitions of a new marker topic; the driver adds partitions when an epoch has more task slots
COMMITS_PARTITIONS = 8
Record = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]  # topic, key, value, headers


def commits_topic(output_topic: str) -> str:
    """The marker topic of an operator's output topic (`<job>.output.commits`)."""
    return f"{output_topic}.commits"


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
            s = slot(t, worker, {r[0] for r in records})
            if s.last is not None and s.last.covers(t.store_id, epoch):
                stats["skips"] += 1
                if was_fenced:  # a zombie (or a losing copy): the one line that says its late commit was refused
                    log.warning("transactional output of epoch %d worker %d: this attempt was fenced and another "
                                "attempt committed the epoch; its %d records stay aborted", epoch, worker, len(records))
                return False
            p = s.producer
            counts = {topic: len(p.partitions_for(topic)) for topic in {r[0] for r in records}}
            p.begin_transaction()
            sent = [p.send(topic, key=NULL_KEY if key is None and value is None else key, value=value,
                           headers=headers, partition=key_partition(key, counts[topic]))
                    for topic, key, value, headers in records]
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
            drop(tid)
            raise
        except Exception as exc:  # fenced, broker away, a commit of unknown outcome: new producer, read again
            drop(tid)
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


def key_partition(key: bytes | None, partitions: int) -> int | None:
    """The partition Kafka's default partitioner gives a keyed record (murmur2 of the key, as Spark's
    sink and every Kafka client compute it); None for a record without a key (the producer picks).
    Why not leave it to kafka-python: its partitioner looks the topic up in the metadata again for
    every record, 20 % of a send (`python -m bench.txn_cost --parts`, docs/dataplane.md), and a
    saturated key-count epoch sends thousands of records per task."""
    if key is None:
        return None
    return (murmur2(key) & 0x7FFFFFFF) % partitions


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
