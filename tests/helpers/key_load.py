"""Open-loop key-count input for the rebalance tests on real jobs: ~1 500 rows/s until stopped."""

from __future__ import annotations

import random
import threading

from kafka import KafkaProducer


class Load(threading.Thread):
    """~1 500 rows/s (300 every 0.2 s) until `stop` is set: the key `hot` with `hot_share` of them,
    the rest over `keys` keys."""

    def __init__(self, bootstrap: str, topic: str, hot_share: float = 0.0, keys: int = 4000) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.stop = bootstrap, topic, threading.Event()
        self.hot_share, self.keys = hot_share, keys

    def run(self) -> None:
        rng = random.Random(7)
        p = KafkaProducer(bootstrap_servers=self.bootstrap, acks=1, linger_ms=20)
        try:
            while not self.stop.is_set():
                for _ in range(300):
                    key = b"hot" if rng.random() < self.hot_share else b"user-%d" % rng.randrange(self.keys)
                    p.send(self.topic, key=key, value=b"1")
                p.flush()
                self.stop.wait(0.2)
        finally:
            p.close()
