"""The asset watcher's filter: which records on `<job>.signals` start the rebalance DAG.

Airflow's triggerer runs the Kafka provider's `AwaitMessageTrigger` for each job's signals asset
(dags/ballast_rebalance.py) and calls `accept_signal` on every record; a dict starts the DAG (it
becomes the asset event's payload), None skips the record. A record that is not a well-formed
signal of the topic's own job is logged and skipped: it must not wake the DAG, and it must not
stop the watcher either.
"""

from __future__ import annotations

import logging
from typing import Any

from ballast.job_messages import parse_signal
from ballast.protocol import ProtocolError, signals_topic

log = logging.getLogger(__name__)


def accept_signal(message: Any) -> dict[str, Any] | None:
    """`message`: a confluent-kafka Message (topic(), value(), offset()). The payload the DAG run's
    `triggering_asset_events` carry: job, operator, reason, detail, epoch, backlog, busy, at."""
    where = f"{message.topic()}@{message.offset()}"
    try:
        sig = parse_signal(message.value())
    except ProtocolError as exc:
        log.warning("skipped record %s: not a rebalance signal (%s)", where, exc.reason)
        return None
    if message.topic() != signals_topic(sig.job):
        log.warning("skipped record %s: a signal of job %r on another job's topic", where, sig.job)
        return None
    log.info("rebalance signal %s: %s/%s epoch %d: %s", where, sig.job, sig.operator, sig.epoch, sig.detail)
    return {"job": sig.job, "operator": sig.operator, "reason": sig.reason, "detail": sig.detail,
            "epoch": sig.epoch, "backlog": sig.backlog, "busy": sig.busy, "at": sig.at.isoformat()}
