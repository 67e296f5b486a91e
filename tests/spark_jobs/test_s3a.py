"""spark_jobs.s3a: users write s3:// and Spark gets s3a:// (every other URI unchanged), Spark's S3A
settings come from the AWS_* variables and carry no key, and Spark's failures on an S3 checkpoint
say what to do. Fast: no services."""

from __future__ import annotations

import pytest

from ballast.errors import BallastError
from spark_jobs.s3a import SparkStorageError, explain_spark_storage_error, hadoop_uri, is_s3_uri, s3a_conf
from spark_jobs.storage import Location

pytestmark = pytest.mark.dataplane


def test_users_write_s3_and_spark_gets_s3a_the_rest_unchanged(tmp_path):
    assert hadoop_uri("s3://ballast/job/ckpt/spark") == "s3a://ballast/job/ckpt/spark"
    assert hadoop_uri("S3://b/p") == "s3a://b/p"
    for same in ("s3a://b/p", "hdfs://nn:8020/ckpt", "gs://b/p", "file:///tmp/x", "/tmp/x"):
        assert hadoop_uri(same) == same
    assert is_s3_uri("s3://b/p") and is_s3_uri("s3a://b/p") and not is_s3_uri("gs://b/p")
    assert not is_s3_uri("/tmp/s3://x")
    loc = Location.of(tmp_path) / "spark"
    assert loc.hadoop_uri == str(tmp_path / "spark")


def test_s3a_settings_come_from_the_aws_variables_and_carry_no_secret():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:8014", "AWS_ACCESS_KEY_ID": "id-1",
           "AWS_SECRET_ACCESS_KEY": "very-secret", "AWS_REGION": "eu-west-3"}
    conf = s3a_conf(env)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8014"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("EnvironmentVariableCredentialsProvider")
    assert conf["spark.hadoop.fs.s3a.fast.upload.buffer"] == "bytebuffer", "no upload buffer on local disk"
    assert conf["spark.hadoop.fs.s3a.connection.expect.continue"] == "false", "a PUT sends its body at once"
    assert not any("very-secret" in v or "id-1" in v for v in conf.values()), "keys stay in the environment"
    aws = s3a_conf({"AWS_REGION": "us-east-1"})  # AWS itself: its own endpoint, the default credential chain
    assert "spark.hadoop.fs.s3a.endpoint" not in aws and "spark.hadoop.fs.s3a.aws.credentials.provider" not in aws
    assert s3a_conf({"AWS_ENDPOINT_URL": "https://s3.example:9000"})[
        "spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"


@pytest.mark.parametrize("java, says", [
    ("java.lang.RuntimeException: java.lang.ClassNotFoundException: Class org.apache.hadoop.fs.s3a.S3AFileSystem "
     "not found", "make setup"),
    ('org.apache.hadoop.fs.UnsupportedFileSystemException: No FileSystem for scheme "s3a"', "make setup"),
    ("java.nio.file.AccessDeniedException: s3a://ballast/j/ckpt/spark/metadata: getFileStatus on "
     "s3a://ballast/j/ckpt/spark/metadata: software.amazon.awssdk.services.s3.model.S3Exception: Forbidden "
     "(Service: S3, Status Code: 403)", "AWS_SECRET_ACCESS_KEY"),
    ("org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://nope/j': Bucket does not exist", "create it"),
    ("org.apache.hadoop.net.ConnectTimeoutException: ... Unable to execute HTTP request: Connect to "
     "127.0.0.1:1 failed: Connection refused", "did not answer"),
])
def test_spark_failures_on_an_s3_checkpoint_say_what_to_do(java, says):
    err = explain_spark_storage_error(RuntimeError(java), "s3://ballast/j/ckpt/spark")
    assert isinstance(err, SparkStorageError) and isinstance(err, BallastError)
    assert says in str(err) and "s3a://ballast/j/ckpt/spark" in str(err)
    assert explain_spark_storage_error(RuntimeError(java), "/local/ckpt") is None
    assert explain_spark_storage_error(RuntimeError("AnalysisException: no such column"), "s3://b/c") is None
