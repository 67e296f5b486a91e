"""Input and pure-Python reference of the tumbling-window processor tests
(examples/operators/window_counts.py)."""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
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


class WindowJob:
    """The window processor as a live job on a topic of its own (the split and merge system tests):
    3 000 events of 60 users produced, the job started at `bins` bins on 2 workers; `finish()` waits
    for every event, flushes the last windows and waits for every window; `check()` asserts each
    (user, window) was emitted exactly once and equals the reference.

    Another processor of the same input and output (e.g. tests/system/sliding_counts.py): `operator`
    names it, `py_files` ship its module (to the executors with addPyFile, to the driver on
    sys.path) and `ref` gives its reference windows from the events."""

    OPERATOR = "window_counts:WindowCounts"

    def __init__(self, spark: Any, bootstrap: str, make_topics: Any, name: str, tmp_path: Path, db_url: str,
                 bins: int, seed: int, operator: str | None = None, py_files: Sequence[Path] = (),
                 ref: Callable[[list[dict[str, Any]]], list[tuple[str, int, int, int]]] = reference) -> None:
        from spark_jobs.runner import RunConfig, start_job

        self.bootstrap, self.job, self.topic = bootstrap, name, f"{name}.in"
        self.operator = operator or self.OPERATOR
        make_topics({self.topic: 2})
        self.evs, _ = produce_events(bootstrap, self.topic, 2, 3000, users=60, seed=seed)
        self.expected = ref(self.evs)
        for f in (EXAMPLES / "window_counts.py", *py_files):
            spark.sparkContext.addPyFile(str(f))
            if str(Path(f).parent) not in sys.path:
                sys.path.insert(0, str(Path(f).parent))
        self.cfg = RunConfig(job=name, operator=self.operator, input_topic=self.topic,
                             checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=bootstrap, db_url=db_url, bins=bins,
                             workers=2, trigger_ms=100, max_offsets_per_trigger=400)
        self.runner = start_job(spark, self.cfg)

    def alive(self) -> None:
        if self.runner.query.exception() is not None:
            raise AssertionError(f"query failed: {self.runner.query.exception()}")

    def outputs(self) -> list[tuple[str, int, int, int]]:
        from spark_jobs.output import read_output

        return sorted(as_tuple(json.loads(o.value)) for o in read_output(self.bootstrap, f"{self.job}.output")[0])

    def finish(self) -> None:
        from tests.helpers.dp_helpers import consumed_rows, produce
        from tests.helpers.wait import wait_until

        ckpt = self.cfg.checkpoint_dir + "/spark"
        wait_until(lambda: consumed_rows(ckpt, self.topic) == len(self.evs), 300, "all events consumed",
                   check=self.alive)
        fk, fv = flush_record(self.evs)
        produce(self.bootstrap, self.topic, fk, 1, fv)
        wait_until(lambda: len(self.outputs()) >= len(self.expected), 240, "every window emitted", check=self.alive)

    def check(self) -> None:
        got = self.outputs()
        assert len(set(got)) == len(got), "a (user, window) emitted twice: a timer fired more than once"
        assert got == self.expected, (f"{len(set(got) - set(self.expected))} unexpected, "
                                      f"{len(set(self.expected) - set(got))} missing")
