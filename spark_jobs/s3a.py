"""Spark's checkpoint on S3: one URI for users, `s3a://` and its settings for Spark.

Spark's own checkpoint goes through Hadoop's filesystems, which name S3 `s3a://`. Users write
`s3://bucket/path` everywhere; this module owns the mapping: `hadoop_uri` (and so
`spark_jobs.storage.Location.hadoop_uri`) is the URI to give Spark, `s3a_conf()` the
`spark.hadoop.fs.s3a.*` settings made from the same AWS_* variables pyarrow reads
(spark_jobs/session.py adds them, and the S3A jars, to a job whose checkpoint is on S3), and
`explain_spark_storage_error` turns Spark's S3A failures into what to do. Apart from
spark_jobs.storage, which reads and writes through pyarrow and never through Hadoop.
"""

from __future__ import annotations

import os
import re

from ballast.errors import BallastError

#: URI schemes Hadoop (so Spark's checkpoint) names differently from pyarrow and the AWS SDK
_HADOOP_SCHEMES = {"s3": "s3a"}


#: Spark's conf for the checkpoint's file manager, and its manager on Hadoop's FileSystem API: what an
#: s3a:// checkpoint needs (below) and what every job's epochs use (spark_jobs.session.EPOCH_CONF)
CHECKPOINT_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_CHECKPOINT_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                                  "FileSystemBasedCheckpointFileManager")


def hadoop_uri(uri: str) -> str:
    """`uri` as Hadoop's filesystems (Spark's checkpoint) read it: `s3://b/p` -> `s3a://b/p`;
    every other URI and local path unchanged."""
    scheme, sep, rest = uri.partition("://")
    return f"{_HADOOP_SCHEMES.get(scheme.lower(), scheme)}{sep}{rest}" if sep else uri


def is_s3_uri(uri: str) -> bool:
    return uri.partition("://")[0].lower() in ("s3", "s3a") and "://" in uri


class SparkStorageError(BallastError, RuntimeError):
    """Spark could not use its checkpoint on an object store (S3A): the message says why and what to do."""


def explain_spark_storage_error(exc: BaseException, uri: str) -> SparkStorageError | None:
    """A SparkStorageError for Spark's failure `exc` to use the checkpoint `uri` through S3A
    (jars missing, keys refused, bucket missing, server away); None when `exc` is something else."""
    if not is_s3_uri(uri):
        return None
    text = str(exc)
    first = next((ln.strip() for ln in text.splitlines() if "Exception" in ln or "Error" in ln), text[:300])[:400]
    where = os.environ.get("AWS_ENDPOINT_URL") or "AWS"
    if re.search(r"S3AFileSystem not found|No FileSystem for scheme \W?s3a|NoClassDefFoundError: software/amaz",
                 text):
        why = ("Hadoop's S3A jars are not on Spark's classpath: run `make setup` (it fetches them into "
               ".cache/jars/hadoop-aws) and start the job through spark_jobs.session.build_spark")
    elif re.search(r"AccessDenied|403 Forbidden|InvalidAccessKeyId|SignatureDoesNotMatch|NoAuthWithAWS", text):
        why = (f"the server at {where} refused the credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
               "for the driver and every executor (`python scripts/stack.py s3-env` for the local server's)")
    elif re.search(r"UnknownStoreException|NoSuchBucket|does not exist", text):
        why = f"its bucket does not exist at {where}: create it (Ballast makes no buckets) or fix the URI"
    elif re.search(r"ConnectException|Connection refused|Unable to execute HTTP request|UnknownHost|timed out", text):
        why = (f"the server at {where} (AWS_ENDPOINT_URL) did not answer: check that it is up and reachable from "
               "the driver and the executors")
    else:
        return None
    return SparkStorageError(f"Spark's checkpoint {uri} (as {hadoop_uri(uri)}): {why}. Spark said: {first}")


def s3a_conf(env: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings for a checkpoint on S3 through Hadoop's S3A, from the AWS SDK's variables in
    `env` (default: this process's), so Spark reaches the same server with the same keys as pyarrow.

    Keys never go into Spark's conf: S3A reads them from the environment of the driver and of each
    executor (the SDK's EnvironmentVariableCredentialsProvider), as pyarrow does for the state."""
    env = dict(os.environ if env is None else env)
    conf = {
        # small objects written whole: buffer uploads in memory, never in a local directory
        "spark.hadoop.fs.s3a.fast.upload.buffer": "bytebuffer",
        # the classic input stream: Hadoop 3.5's default ("analytics") insists on an ETag in every
        # HEAD answer, which S3-compatible servers do not all send (s3s-fs does not)
        "spark.hadoop.fs.s3a.input.stream.type": "classic",
        "spark.hadoop.fs.s3a.change.detection.version.required": "false",
        # Spark's checkpoint needs no check that a file's parents are not files, or a marker per mkdir
        "spark.hadoop.fs.s3a.performance.flags": "create,mkdir",
        # the FileSystem API, not FileContext: FileContext's create checks that the parent is a
        # directory with a HEAD on its key, which a server that maps keys to files (s3s-fs) answers
        # as an object; with it the Spark checkpoint fails at its first file
        CHECKPOINT_MANAGER_KEY: FILE_SYSTEM_CHECKPOINT_MANAGER,
        # the same quirk makes an empty directory list as itself, so a new query would find its
        # offsets "not empty"; the job's own journal (ballast/job.json) refuses a foreign dir instead
        "spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart": "false",
        # every PUT sends its body with its headers instead of waiting for "100 Continue": the
        # checkpoint's objects are small, so the handshake buys nothing, and a server that answers a
        # PUT without reading its body (s3s-fs on a directory marker) leaves the connection's state to
        # the timing of that wait (docs/suite.md, "The S3 checkpoint failure")
        "spark.hadoop.fs.s3a.connection.expect.continue": "false",
    }
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:  # a server other than AWS's: its address, path-style URLs (as pyarrow uses)
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.lower().startswith("https")).lower()
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    if env.get("AWS_ACCESS_KEY_ID"):  # the keys pyarrow uses, not whatever else the default chain finds
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider")
    return conf
