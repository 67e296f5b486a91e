"""What the driver spends building a keyed epoch's plan (issue 22, item 4): the epoch's per-epoch
expressions (a pre-aggregating query's late filter and combine), the routing and the worker's task,
as spark_jobs.epoch_apply builds them, with the task made two ways:

    python -m bench.plan_build [--rows 2000] [--builds 25] [--rounds 2] [--handoff-against REV]

- `closure`: a new Python function per epoch holding the epoch's configuration (the runner before
  2026-12-01): PySpark's `mapInArrow` pickles and registers it and resolves each column by a Py4J call;
- `static`: the runner's task now, `spark_jobs.worker.apply_task`, one function whose UDF is made once
  (spark_jobs.routing.map_in_arrow); the configuration travels as a Spark local property.
Only the building is timed (no job runs): on one local Spark over a cached batch of NEXMark bids, for
Q7 and Q5, `--builds` builds per variant per round, the variants alternating by round; prints each
variant's median after each round's first five builds, and the ratio static ÷ closure.

`--handoff-against REV`: also a chain's second operator's input rows (`InputRows.rows`, the hand-off
dedup, which such an operator builds every epoch), this checkout's against git revision REV's
spark_jobs/inputs.py loaded beside it, alternating by round, over 200 hand-off records with ids and
a mark of 8 groups; prints each one's median build time and the ratio this ÷ REV.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.parse_width import bid_rows

VARIANTS = ("closure", "static")


def _closure(epoch: int, assignment: list[int]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A task made per epoch, over that epoch's configuration, as the runner's was."""
    conf = {"epoch": epoch, "assignment": tuple(assignment)}

    def task(batches: Iterator[Any], conf: dict[str, Any] = conf) -> Iterator[Any]:
        yield from ()

    return task


def build(op: Any, prepared: Any, epoch: int, variant: str, assignment: list[int]) -> Any:
    """One epoch's plan, built and not run."""
    from spark_jobs.routing import route
    from spark_jobs.timers import EpochClock
    from spark_jobs.worker import apply_task

    clock = EpochClock(epoch, 2_000_000_000_000, 0)  # nothing late, nothing ahead
    fn = apply_task if variant == "static" else _closure(epoch, assignment)
    return route(op.key(prepared, clock), 8, assignment, 2, fn, combine=op.combine)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.plan_build", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000, help="bids in the cached batch (building reads none)")
    ap.add_argument("--builds", type=int, default=25, help="builds per variant per round (the first five not counted)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--handoff-against", metavar="REV", help="also time the hand-off dedup against this git revision's")
    a = ap.parse_args(argv)
    from spark_jobs.nexmark.windows import Q5, Q7
    from spark_jobs.processing import ProcessorOperator

    spark, src = bid_rows("bench.plan_build", a.rows)
    assignment = [0, 1] * 128  # 256 bins over 2 workers
    skip = min(5, a.builds - 1)
    print(f"{a.builds} builds per variant per round, {a.rounds} rounds, medians after each round's first {skip}")
    for name, q in (("q7", Q7), ("q5", Q5)):
        op = ProcessorOperator(q)
        prepared = op.prepare(src)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(a.rounds):
            for v in (VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))):
                for i in range(a.builds):
                    t0 = time.perf_counter()
                    build(op, prepared, r * a.builds + i, v, assignment)
                    if i >= skip:
                        times[v].append((time.perf_counter() - t0) * 1000)
        med = {v: statistics.median(ts) for v, ts in times.items()}
        for v in VARIANTS:
            print(f"{name}  {v:8s} {med[v]:6.1f} ms", flush=True)
        print(f"{name}  static / closure {med['static'] / med['closure']:.3f}", flush=True)
    if a.handoff_against:
        handoff(spark, a.handoff_against, a.builds, a.rounds, skip)
    spark.stop()
    return 0


def _inputs_at(rev: str) -> Any:
    """spark_jobs/inputs.py as it was at git revision `rev`, loaded as a module of its own."""
    from bench.infra import REPO

    src = subprocess.run(["git", "show", f"{rev}:spark_jobs/inputs.py"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory(prefix="plan-build-") as d:  # the module stays loaded, its file goes
        path = Path(d) / "inputs_at_rev.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location("inputs_at_rev", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["inputs_at_rev"] = mod  # its dataclasses look their module up
        spec.loader.exec_module(mod)
    return mod


def handoff(spark: Any, rev: str, builds: int, rounds: int, skip: int) -> None:
    """`--handoff-against` (module docstring)."""
    import spark_jobs.inputs as this
    from spark_jobs.storage import Location

    topic = "p.winners.out"
    rows = [(b"k", b"v%d" % i, topic, i % 4, i, [("ballast-id", f"{i % 5}:{i % 2}:{i}".encode())]) for i in range(200)]
    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long, "
                                     "headers array<struct<key:string,value:binary>>")
    mods = {"this": this, rev: _inputs_at(rev)}
    times: dict[str, list[float]] = {v: [] for v in mods}
    taken: dict[str, list[bytes]] = {}
    journals = tempfile.TemporaryDirectory(prefix="plan-build-journal-")
    for r in range(rounds):
        for v in (list(mods) if r % 2 == 0 else list(reversed(mods))):
            journal = Path(tempfile.mkdtemp(dir=journals.name))
            inputs = mods[v].InputRows([topic], (topic,), Location.of(str(journal)), observe=True)
            mark = {f"{topic}|{p}|{w}": [1, 10] for p in range(4) for w in range(2)}
            (journal / "handoff" / "0.json").write_text(json.dumps(mark))
            for i in range(builds):
                t0 = time.perf_counter()
                out = inputs.rows(df, 1 + i)
                if i >= skip:
                    times[v].append((time.perf_counter() - t0) * 1000)
            taken[v] = sorted(bytes(x["value"]) for x in out.collect())
    journals.cleanup()
    med = {v: statistics.median(ts) for v, ts in times.items()}
    print(f"handoff  same rows taken: {taken['this'] == taken[rev]} ({len(taken['this'])} of {len(rows)})")
    for v in mods:
        print(f"handoff  {v:8s} {med[v]:6.1f} ms", flush=True)
    print(f"handoff  this / {rev} {med['this'] / med[rev]:.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
