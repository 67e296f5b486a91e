"""One way to get a SparkSession that can read Kafka and run the venv's Python in its workers.

Why here: the Kafka connector is not in the pyspark wheel (its jars come from Maven Central into
`.cache/jars/spark-kafka`, see jvm/spark-kafka/pom.xml), and Spark's Python workers default to
`python3` on PATH rather than this venv (docs/operations.md, "Traps"). Both the job and the tests build sessions here.
Ballast's own Kafka writer (spark_jobs.id_sink) is a jar `make setup` builds into `.cache/jars/ballast-sink`.
A job whose checkpoint is on S3 also gets Hadoop's S3A and the AWS SDK modules it uses
(`.cache/jars/hadoop-aws`, jvm/hadoop-aws/pom.xml) and the S3A settings of spark_jobs.s3a.s3a_conf.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ballast.errors import BallastError
from ballast.options import settings
from spark_jobs.s3a import CHECKPOINT_MANAGER_KEY, FILE_SYSTEM_CHECKPOINT_MANAGER, is_s3_uri, s3a_conf

REPO = Path(__file__).resolve().parent.parent
CONNECTOR_JARS = settings().cache_dir / "jars" / "spark-kafka"
S3A_JARS = settings().cache_dir / "jars" / "hadoop-aws"
SINK_JARS = settings().cache_dir / "jars" / "ballast-sink"  # jvm/ballast-sink, built by scripts/build_sink.sh
SESSION_TIME_ZONE = "UTC"


#: What a job's epochs need of its session, set by its streaming query (spark_jobs.streaming_query)
#: on whatever session it is given (a test's shared one too): no adaptive query execution. An epoch
#: is a batch job inside `foreachBatch`, which Spark plans adaptively, while Spark's own streaming
#: queries run without it (StreamExecution turns it off: it may change a shuffle's partition count).
#: An epoch's shuffles are Ballast's own (the routing's `repartitionById` into the W workers;
#: `shuffle_partitions` elsewhere), so AQE has nothing to adapt; it costs a re-planning on the driver
#: between the stages of every epoch, and could drop the routing's W tasks for an empty stage (its
#: `AQEPropagateEmptyRelation`). `python -m bench.adaptive`: an epoch's job without it took
#: 0.86-0.99 of the time with it (docs/benchmarks.md, "An epoch without adaptive execution").
#: And Spark's offset and commit logs through Hadoop's FileSystem API rather than its FileContext
#: API: without Hadoop's native library (a pip-installed Spark has none) FileContext's local file
#: system resolves each path's links by running `readlink` and `chmod` as child processes of the
#: driver's JVM, about 15 of them per epoch between the epochs (strace), 38 -> 9 ms per log write
#: (`python -m bench.checkpoint_io`; docs/dataplane.md, "One epoch"). The same files, renamed into
#: place from a temporary file as before, their checksums kept; for s3a:// Spark uses this manager anyway.
EPOCH_CONF = {"spark.sql.adaptive.enabled": "false", CHECKPOINT_MANAGER_KEY: FILE_SYSTEM_CHECKPOINT_MANAGER}


def for_epochs(spark: Any) -> None:
    """Set EPOCH_CONF on `spark` (a job's session, before its warm-up plans anything)."""
    for k, v in EPOCH_CONF.items():
        spark.conf.set(k, v)


def connector_jars() -> list[str]:
    """The jars every Ballast session needs: Spark's Kafka connector and Ballast's Kafka writer."""
    jars = sorted(str(p) for p in CONNECTOR_JARS.glob("*.jar"))
    if not any("spark-sql-kafka" in j for j in jars):
        raise RuntimeError(f"Spark Kafka connector jars missing in {CONNECTOR_JARS}: run `make setup`")
    sink = SINK_JARS / "ballast-sink.jar"
    if not sink.is_file():
        raise RuntimeError(f"Ballast's Kafka writer {sink} is missing: run `make setup` (it needs javac)")
    return [*jars, str(sink)]


class JarsMissing(BallastError, RuntimeError):
    """A jar set `make setup` fetches is not in the cache."""


def s3a_jars() -> list[str]:
    """Hadoop's S3A (hadoop-aws, matching pyspark's Hadoop client) and the AWS SDK v2 modules it uses."""
    jars = sorted(str(p) for p in S3A_JARS.glob("*.jar"))
    if not any(Path(j).name.startswith("hadoop-aws-") for j in jars):
        raise JarsMissing(f"Hadoop's S3A jars (for a Spark checkpoint on s3://) are missing in {S3A_JARS}: "
                          "run `make setup` (it fetches them from Maven Central, about 13 MB)")
    return jars


def archive_path() -> Path | None:
    """Where the driver's class-data archive (spark_jobs.jvm_archive) for this JDK, Spark and
    connector set lives (None: no `java` on PATH)."""
    java = shutil.which("java", path=os.environ.get("PATH"))
    if java is None:
        return None
    import pyspark

    real = Path(java).resolve()
    parts = [str(real), str(real.stat().st_mtime_ns), pyspark.__version__, *connector_jars()]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return settings().cache_dir / "spark-cds" / f"driver-{key}.jsa"


def java_option() -> str | None:
    """`-XX:SharedArchiveFile=...` when the archive exists, else None (start without one)."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path}" if path is not None and path.is_file() else None


def build_spark(app_name: str = "ballast", master: str | None = None, conf: dict[str, str] | None = None,
                archive: bool = True, checkpoint: str | None = None):
    """A SparkSession on `SPARK_MASTER` (default local[2]) with the connector and this venv's Python;
    its driver starts from the class-data archive when there is one (`archive`; spark_jobs.jvm_archive).
    `checkpoint`: the job's checkpoint dir; on s3:// the session gets S3A's jars and settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    opts = settings()
    master = master or opts.spark_master
    jars = connector_jars()
    conf = dict(conf or {})
    if checkpoint is not None and is_s3_uri(checkpoint):
        jars += s3a_jars()
        conf = {**s3a_conf(), **conf}
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", ",".join(jars))
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.sql.shuffle.partitions", str(opts.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", opts.driver_memory)
        # replays are byte-identical on any host (docs/dataplane.md, "Deterministic replays"): SQL
        # timestamps parse and print in UTC, not in the zone of the JVM that runs the epoch
        .config("spark.sql.session.timeZone", SESSION_TIME_ZONE)
    )
    # local mode stays on loopback; on a cluster the executors must reach the driver, so its
    # address is Spark's default (or BALLAST_DRIVER_HOST) unless the caller's conf says otherwise
    host = opts.driver_host or ("127.0.0.1" if master.startswith("local") else None)
    if host:
        builder = builder.config("spark.driver.bindAddress", host).config("spark.driver.host", host)
    if archive:
        cds = java_option()
        if cds:
            conf["spark.driver.extraJavaOptions"] = " ".join(
                x for x in (conf.get("spark.driver.extraJavaOptions"), cds) if x)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(opts.spark_log_level)
    if not master.startswith("local"):  # executors elsewhere get the job's code from the driver
        from spark_jobs.ship import job_archive

        spark.sparkContext.addPyFile(str(job_archive()))
    return spark
