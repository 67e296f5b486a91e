"""An epoch's control records, read by the driver from the offsets Spark logged for the epoch.

The control topic is a topic of the job's Kafka source, so a control message starts an epoch and
Spark's offset log fixes, per epoch, which control records it covers. The driver reads exactly those
records itself (a plain Kafka consumer, `assign` + `seek`), so that the stream can carry the input
rows only, already through the operator's stream plan (spark_jobs.stream_plan), and an epoch with control
records needs no second Spark job over its batch. A replay reads the same range, so it decides
from the same records. A range Kafka no longer holds (retention deleted it) is an error, as
Spark's `failOnDataLoss` makes it for input records: a lost control record is a lost step.
"""

from __future__ import annotations

import time
from typing import Any

from ballast.errors import BallastError
from spark_jobs.control import ControlRecord

#: how long one read may wait for the broker before it counts as failed (the caller retries it)
READ_TIMEOUT_S = 30.0


class ControlRangeLost(BallastError, RuntimeError):
    """Control records an epoch covered are no longer in Kafka."""


def read_control(consumer: Any, topic: str, ranges: dict[int, tuple[int, int]],
                 timeout_s: float = READ_TIMEOUT_S) -> list[ControlRecord]:
    """The records of `topic` in `ranges` ({partition: (start, end)}, end exclusive), ordered by
    (partition, offset). Raises kafka's `KafkaTimeoutError` when the broker does not deliver them
    within `timeout_s` (transient: the runner's Kafka retry waits out an outage)."""
    from kafka import TopicPartition
    from kafka.errors import KafkaTimeoutError

    wanted = {TopicPartition(topic, p): (s, e) for p, (s, e) in ranges.items() if e > s}
    if not wanted:
        return []
    earliest = consumer.beginning_offsets(list(wanted))
    lost = {tp.partition: (s, earliest[tp]) for tp, (s, _) in wanted.items() if earliest[tp] > s}
    if lost:
        raise ControlRangeLost(
            f"control records of {topic} are gone from Kafka (partition: (first needed, first kept)) {lost}: "
            "retention deleted them before the epoch that covers them ran. Steps they carried are lost: check the "
            "plan's state in the console and re-emit it; give the control topic a longer retention")
    consumer.assign(list(wanted))
    for tp, (s, _) in wanted.items():
        consumer.seek(tp, s)
    out: list[ControlRecord] = []
    deadline = time.monotonic() + timeout_s
    pending = dict(wanted)
    while pending:
        if time.monotonic() > deadline:
            raise KafkaTimeoutError(f"reading control records {ranges} of {topic} took over {timeout_s:.0f}s")
        for tp, recs in consumer.poll(timeout_ms=500).items():
            if tp not in pending:
                continue
            end = pending[tp][1]
            out.extend(ControlRecord(f"{tp.partition}:{r.offset}", r.value) for r in recs if r.offset < end)
        for tp in [tp for tp, (_, end) in pending.items() if consumer.position(tp) >= end]:
            pending.pop(tp)
    consumer.unsubscribe()
    return sorted(out, key=lambda r: tuple(int(x) for x in r.offset.split(":")))
