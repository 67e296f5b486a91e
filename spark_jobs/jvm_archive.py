"""A class-data-sharing (CDS) archive of the Spark driver's classes: a driver JVM that starts from it
maps Spark's already parsed and verified classes from one file instead of loading thousands again.

Why: every Ballast job, every restart after a crash and every test that runs a job as a process pays
the driver's start-up; on 2 cores that is 10-30 s before the first epoch, much of it class loading.
Measured (`python -m bench.driver_startup`, quiet machine): up to a first SQL result, 5.9 s of wall
time and 8.8 s of the driver JVM's CPU with the archive against 9.9 s and 15.3 s without.

The archive is made once (`make setup` runs `python -m spark_jobs.jvm_archive`) by a driver that
runs a small SQL, Arrow and streaming workload and dumps what it loaded at exit
(`-XX:ArchiveClassesAtExit`, JDK 13+); `spark_jobs.session.build_spark` then starts every driver
with `-XX:SharedArchiveFile`. Steady-state speed is unchanged (same JIT); only start-up is cheaper.

The archive is named after what it depends on (`spark_jobs.session.archive_path`: the `java`
binary, the pyspark version, the connector jars): a JDK or Spark upgrade names another file, and
until it is made the driver simply starts without one. A JVM that finds an archive unusable logs
one warning and loads classes the normal way (`-Xshare:auto`, the default): a stale archive costs
start-up time, never a failed start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from spark_jobs.session import archive_path


def _workload(spark) -> None:
    """What a job's driver loads: SQL with codegen, an Arrow round trip to Python, a streaming query
    with foreachBatch and its checkpoint."""
    import tempfile

    spark.range(10_000).selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
    spark.range(1_000).mapInArrow(lambda batches: batches, "id long").count()
    with tempfile.TemporaryDirectory(prefix="ballast-cds-") as tmp:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
             .writeStream.foreachBatch(lambda df, _epoch: df.count())
             .option("checkpointLocation", tmp).trigger(processingTime="500 milliseconds").start())
        deadline = time.time() + 120
        while (q.lastProgress is None or q.lastProgress["batchId"] < 1) and time.time() < deadline:
            time.sleep(0.2)
        q.stop()


def make(force: bool = False) -> Path | None:
    """Make the archive unless it exists; returns its path (None: no `java`, or no archive written)."""
    path = archive_path()
    if path is None:
        print("jvm_archive: no `java` on PATH; skipped", file=sys.stderr)
        return None
    if path.is_file() and not force:
        print(f"jvm_archive: {path} up to date")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"partial-{os.getpid()}.jsa")  # not matched by the glob below
    t0 = time.time()
    print("jvm_archive: running a short Spark workload to archive the driver's classes (a minute)")
    # in a child: the JVM writes the archive when it exits, which it does when its Python parent ends
    log = path.with_name("make.log")
    with open(log, "wb") as out:
        rc = subprocess.run([sys.executable, "-m", "spark_jobs.jvm_archive", "--dump", str(tmp)],
                            stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = log.read_text(errors="replace")[-2000:]
        print(f"jvm_archive: the workload failed (exit {rc}); jobs start without an archive. {log}:\n{tail}",
              file=sys.stderr)
        tmp.unlink(missing_ok=True)
        return None
    size, deadline = -1, time.time() + 120
    while time.time() < deadline:  # the JVM may still be writing after the child returned
        now = tmp.stat().st_size if tmp.is_file() else -1
        if now > 0 and now == size:
            break
        size = now
        time.sleep(1.0)
    if size <= 0:
        print("jvm_archive: the driver wrote no archive; jobs start without one", file=sys.stderr)
        return None
    for old in path.parent.glob("driver-*.jsa"):  # archives of an earlier JDK or Spark
        old.unlink(missing_ok=True)
    tmp.replace(path)
    print(f"jvm_archive: {path} ({path.stat().st_size >> 20} MiB) made in {time.time() - t0:.0f} s")
    return path


def _dump(tmp: str) -> None:
    from spark_jobs.session import build_spark

    spark = build_spark("ballast-cds", conf={
        "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={tmp} -Xlog:cds=off -Xlog:cds+dynamic=off",
        "spark.ui.showConsoleProgress": "false"}, archive=False)
    _workload(spark)
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--dump"]:
        _dump(sys.argv[2])
    else:
        make(force="--force" in sys.argv[1:])
