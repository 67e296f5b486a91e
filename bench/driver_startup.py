"""What the driver's class-data archive saves: a Spark driver's start-up with and without it, in one run.

`python -m bench.driver_startup [--pairs 3]` starts `2 x pairs` drivers one after the other,
alternating with (`build_spark()`) and without (`build_spark(archive=False)`) the archive
(spark_jobs.jvm_archive), each in a fresh Python process: the session, then a first SQL result.
Per driver it records the wall time and the driver JVM's CPU time (user + system) up to that
result; it prints one JSON line per driver and a summary line with the medians and the ratios
with ÷ without. CPU time is the steadier figure on a shared machine; the wall time is what a job
waits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

_CHILD = """
import json, sys, time
t0 = time.time()
import psutil
from spark_jobs.session import build_spark
spark = build_spark("ballast-startup-bench", archive=sys.argv[1] == "on")
assert spark.range(1000).selectExpr("sum(id) AS s").collect()[0].s == 499500
wall = time.time() - t0
cpu = sum(sum(p.cpu_times()[:2]) for p in psutil.Process().children(recursive=True) if "java" in p.name())
print(json.dumps({"archive": sys.argv[1] == "on", "wall_s": round(wall, 2), "jvm_cpu_s": round(cpu, 2)}))
spark.stop()
"""


def one(archive: bool) -> dict[str, Any]:
    """One driver in a fresh process: its start-up's wall and JVM CPU seconds."""
    out = subprocess.run([sys.executable, "-c", _CHILD, "on" if archive else "off"], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per side and the ratios with ÷ without."""
    s: dict[str, Any] = {"drivers": len(runs)}
    for k in ("wall_s", "jvm_cpu_s"):
        on = statistics.median(r[k] for r in runs if r["archive"])
        off = statistics.median(r[k] for r in runs if not r["archive"])
        s[k] = {"with": on, "without": off, "ratio": round(on / off, 3) if off else float("nan")}
    return s


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args(argv)
    runs = []
    for i in range(a.pairs):
        for archive in ((True, False) if i % 2 == 0 else (False, True)):  # ABBA: a drifting machine cancels out
            runs.append(one(archive))
            print(json.dumps(runs[-1]), flush=True)
    print(json.dumps({"summary": summary(runs)}))


if __name__ == "__main__":
    main()
