"""How to submit an application to a loopback Spark cluster: the spark-submit line and its environment.

SPARK_HOME is the pyspark wheel's directory (it has `bin/spark-class` and `bin/spark-submit`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Protocol

from spark_cluster_procs import HOST


class HasMasterURL(Protocol):
    """What a submit needs of a cluster (spark_cluster.SparkCluster): not imported, since
    spark_cluster imports this module to build its own submit lines."""

    @property
    def master_url(self) -> str: ...


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def submit_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for running `spark_submit_cmd`: the driver binds to 127.0.0.1 only."""
    env = os.environ.copy()
    env.pop("SPARK_CONF_DIR", None)
    env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP=HOST, PYSPARK_PYTHON=sys.executable)
    env.update(extra or {})
    return env


def spark_submit_cmd(
    cluster_or_master_url: HasMasterURL | str,
    app: str,
    app_args: list[str],
    *,
    py_files: Iterable[str] = (),
    conf: dict[str, str] | None = None,
    jars: list[str] | None = None,
    name: str = "ballast",
) -> list[str]:
    """A client-mode spark-submit command line (run it with env=submit_env()).

    `jars=None` adds the Kafka connector (.cache/jars/spark-kafka); `conf` overrides the defaults
    (this venv's Python on both sides, driver on 127.0.0.1, 1-core 512m executors, no driver UI).
    """
    master = cluster_or_master_url if isinstance(cluster_or_master_url, str) else cluster_or_master_url.master_url
    if jars is None:
        from spark_jobs.session import connector_jars

        jars = connector_jars()
    settings = {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.ui.enabled": "false",
        **(conf or {}),
    }
    cmd = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", master, "--deploy-mode", "client",
           "--name", name]
    if jars:
        cmd += ["--jars", ",".join(jars)]
    py_files = list(py_files)
    if py_files:
        cmd += ["--py-files", ",".join(py_files)]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, app, *app_args]
