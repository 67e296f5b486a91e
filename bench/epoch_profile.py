"""Where a NEXMark epoch's time goes, Ballast against Spark's own query, from one cost run's files:

    python -m bench.epoch_profile bench/results/<run-id>

Reads, per query of the run's NEXMark cost experiment, the Ballast job's `epoch N time ms:` lines
(spark_jobs.epoch_times: its phases inside `foreachBatch`, and Spark's own work outside it) and the
native query's progress (`durationMs`), and prints the medians per batch over the batches after
the first two (which pay the start-up), normalised to milliseconds per 1 000 input rows: a table
per query, a profile rather than a guess of what Ballast pays that Spark's query does not.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from spark_jobs.epoch_times import parse_log

ROWS = re.compile(r"epoch (\d+)(?: \(replay\))?: rows=(\d+)")


def ballast_epochs(log: Path) -> list[dict[str, float]]:
    """Per epoch with input: its phases (inside) and Spark's outside durations of the epoch before,
    as {name: ms}, plus `rows`."""
    text = log.read_text(errors="replace")
    rows = {int(m.group(1)): int(m.group(2)) for m in ROWS.finditer(text)}
    times = {e: inside | {f"spark.{k}": v for k, v in outside.items()}
             for e, (inside, outside) in parse_log(text).items()}
    return [times[e] | {"rows": float(rows[e])} for e in sorted(times) if rows.get(e)]


def native_batches(progress: Path) -> list[dict[str, float]]:
    out = []
    for line in progress.read_text().splitlines():
        p = json.loads(line)
        if p.get("numInputRows"):
            d = {f"spark.{k}": float(v) for k, v in p["durationMs"].items()}
            out.append(d | {"rows": float(p["numInputRows"])})
    return out


def per_k_rows(batches: list[dict[str, float]], skip: int = 2) -> dict[str, float]:
    """Median of each duration per 1 000 rows, over the batches after the first `skip`."""
    steady = batches[skip:] or batches
    keys = sorted({k for b in steady for k in b if k != "rows"})
    return {k: statistics.median(1000 * b.get(k, 0.0) / b["rows"] for b in steady) for k in keys}


def profile(run_dir: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for log in sorted((run_dir / "logs").glob("*-nxc-q*.log")):
        q = log.stem.rsplit("-", 1)[1]
        native = run_dir / "nexmark" / "native" / f"{q}.jsonl"
        b = ballast_epochs(log)
        n = native_batches(native) if native.exists() else []
        if b:
            out[q] = {"ballast": per_k_rows(b), "native": per_k_rows(n) if n else {}, "epochs": len(b),
                      "native_batches": len(n)}
    return out


def table(q: str, p: dict[str, Any]) -> str:
    b, n = p["ballast"], p["native"]
    lines = [f"### {q}: ms per 1 000 input rows (medians over {p['epochs']} Ballast epochs, "
             f"{p['native_batches']} native batches)", "", "| where | Ballast | Spark's own query |", "|---|---|---|"]
    inside = [k for k in b if not k.startswith("spark.")]
    lines.append(f"| **in the batch** (`addBatch`) | **{sum(b[k] for k in inside):.1f}** | "
                 f"**{n.get('spark.addBatch', float('nan')):.1f}** |")
    lines += [f"| &nbsp;&nbsp;{k} | {b[k]:.1f} | |" for k in inside]
    for k in sorted({*[k for k in b if k.startswith("spark.")], *[k for k in n if k.startswith("spark.")]}):
        if k in ("spark.addBatch", "spark.triggerExecution"):
            continue
        lines.append(f"| Spark: {k[6:]} | {b.get(k, float('nan')):.1f} | {n.get(k, float('nan')):.1f} |")
    lines.append(f"| Spark: triggerExecution (whole batch) | | {n.get('spark.triggerExecution', float('nan')):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.epoch_profile", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="bench/results/<run-id> of a run with the NEXMark cost experiment")
    a = ap.parse_args(argv)
    prof = profile(a.run_dir)
    if not prof:
        print(f"no Ballast epoch times under {a.run_dir}/logs (a run from before spark_jobs.epoch_times?)")
        return 1
    for q, p in prof.items():
        print(table(q, p) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
