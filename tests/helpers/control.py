"""Write control records as the controller's emitter does (same topic, same key), so a test can
send well-formed, hostile or out-of-order steps straight to a job."""

from __future__ import annotations

from kafka import KafkaProducer

from ballast.protocol import control_topic, message_key


def send_control(bootstrap: str, job: str, payloads: list[bytes], operator: str = "keycount") -> None:
    """Each payload as one record on `<job>.control`, keyed like the emitter's; waits for each ack."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_block_ms=20000)
    try:
        for v in payloads:
            p.send(control_topic(job), key=message_key(job, operator), value=v).get(timeout=30)
    finally:
        p.close()
