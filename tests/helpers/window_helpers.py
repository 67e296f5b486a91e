"""Input and pure-Python reference of the tumbling-window processor tests
(examples/operators/window_counts.py)."""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "operators"
sys.path.insert(0, str(EXAMPLES))

import window_counts as wc  # noqa: E402

BASE_MS = 1_700_000_000_000  # a window boundary
FLUSH_USER = "~flush"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def events(n: int, users: int, seed: int, step_ms: int = 20, disorder_ms: int = 1_000) -> list[dict[str, Any]]:
    """n events, event time advancing `step_ms` per event, each up to `disorder_ms` early (out of
    order by less than the allowed lateness, so none is ever late)."""
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(users):03d}", "ms": BASE_MS + i * step_ms - rng.randrange(disorder_ms),
             "amount": rng.randrange(1, 100)} for i in range(n)]


def records(evs: list[dict[str, Any]]) -> tuple[list[bytes], list[bytes]]:
    """Kafka (key, value) pairs: the value is the JSON the query's input schema reads."""
    return ([e["user"].encode() for e in evs],
            [json.dumps({"user": e["user"], "ts": iso(e["ms"]), "amount": e["amount"]}).encode() for e in evs])


def flush_record(evs: list[dict[str, Any]]) -> tuple[list[bytes], list[bytes]]:
    """One event far ahead in event time: the watermark passes every window of `evs`."""
    last = max(e["ms"] for e in evs) + 10 * wc.WINDOW_MS + wc.LATENESS_MS
    return records([{"user": FLUSH_USER, "ms": last, "amount": 0}])


def reference(evs: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """Every (user, window start, count, total), each once, sorted."""
    acc: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for e in evs:
        start = e["ms"] - e["ms"] % wc.WINDOW_MS
        a = acc[(e["user"], start)]
        a[0] += 1
        a[1] += e["amount"]
    return sorted((u, s, c, t) for (u, s), (c, t) in acc.items())


def as_tuple(d: dict[str, Any]) -> tuple[str, int, int, int]:
    return d["user"], int(d["window_start"]), int(d["count"]), int(d["total"])


def produce_events(bootstrap: str, topic: str, partitions: int, n: int, users: int,
                   seed: int) -> tuple[list[dict[str, Any]], list[tuple[str, int, int, int]]]:
    """`n` window events of `users` users written to `topic`; returns (events, the reference windows)."""
    from tests.helpers.dp_helpers import produce

    evs = events(n, users=users, seed=seed)
    keys, values = records(evs)
    produce(bootstrap, topic, keys, partitions, values)
    return evs, reference(evs)
