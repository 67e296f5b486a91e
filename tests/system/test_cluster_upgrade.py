"""A live code upgrade on the loopback standalone cluster: the processor's version 2 is written after
the job started, on the driver's disk only, and the upgrade step ships it to executors in other
processes (SparkContext.addPyFile over the cluster's file server); every task of the next epoch
imports it before the step goes in, the outputs from the step's epoch on are version 2's, and every
key's count goes on exactly across the upgrade (0 lost, 0 doubled). A version that does not import
is refused and the job runs on."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ballast.code_version import CodeVersion
from ballast.protocol import ControlStep
from scripts.spark_cluster import spark_submit_cmd, start_cluster
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import ensure_job_topics
from spark_jobs.ship import job_archive
from tests.helpers.cluster import JobDriver
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import checkpoints, produce, zipf_keys
from tests.helpers.procs import killpg
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OPERATOR = "upgrade_counter:Counter"


def _step(job: str, plan: str, ref: str, version: str, files: tuple[str, ...] = ()) -> bytes:
    now = datetime.now(UTC)
    return ControlStep(job=job, operator=OPERATOR, plan_id=plan, step=1, steps=1, kind="upgrade", moves=(),
                       workers=2, map_version=0, issued_at=now, effective_at=now,
                       code=CodeVersion(ref, version, files)).to_json()


def test_an_upgrade_ships_its_code_to_the_clusters_executors(kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                             db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    ensure_job_topics(kafka_bootstrap, job, 2)
    mod = f"counts_v2_{job.replace('-', '_')}"
    v2 = tmp_path / "driver-only" / f"{mod}.py"  # no executor has it until the step ships it
    v2.parent.mkdir()
    v2.write_text((REPO / "examples" / "operators" / "counts_v2.py").read_text())
    ckpt = tmp_path / "ckpt"
    spark_ckpt = ckpt / "spark"
    keys = zipf_keys(3_000, 300, seed=11)
    cluster = start_cluster(tmp_path / "cluster", workers=2, cores_per_worker=1, memory_per_worker="1g",
                            start_timeout=120)
    driver: JobDriver | None = None
    try:
        cmd = spark_submit_cmd(
            cluster, str(REPO / "spark_jobs" / "main.py"),
            ["run", "--job", job, "--operator", OPERATOR, "--input-topic", topic, "--bins", "8", "--workers", "2",
             "--checkpoint-dir", f"file://{ckpt}", "--state-uri", f"file://{ckpt}/durable",
             "--bootstrap", kafka_bootstrap, "--db-url", db_url, "--trigger-ms", "300"],
            py_files=[str(job_archive(tmp_path / "dist")), str(HERE / "upgrade_counter.py")],
            conf={"spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.ui.enabled": "false",
                  "spark.sql.shuffle.partitions": "2"},
            name=f"ballast-{job}")
        driver = JobDriver.start(cmd, tmp_path)
        alive = driver.alive

        def consumed(n: int) -> bool:
            eps = committed_epochs(spark_ckpt)
            end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
            return bool(end) and sum(end.get(topic, {}).values()) == n

        produce(kafka_bootstrap, topic, keys[:1_500], 2)
        wait_until(lambda: consumed(1_500), 240, "the first half consumed", poll=1, check=alive)
        for plan, payload in (("nope", _step(job, "nope", "no_such_module_x:Counter", "2")),
                              ("up", _step(job, "up", f"{mod}:Counter", "2", (str(v2),)))):
            send_control(kafka_bootstrap, job, [payload], operator=OPERATOR)
            wait_until(lambda plan=plan: (plan, 1) in checkpoints(db_url, job), 180, f"the checkpoint of {plan}",
                       poll=0.5, check=alive)
        cps = checkpoints(db_url, job)
        assert cps[("nope", 1)].status == "rejected" and "does not import" in (cps[("nope", 1)].reason or "")
        assert cps[("up", 1)].status == "applied", cps[("up", 1)].reason
        produce(kafka_bootstrap, topic, keys[1_500:], 2)
        wait_until(lambda: consumed(len(keys)), 240, "the second half consumed", poll=1, check=alive)
        subprocess.run([sys.executable, "-m", "spark_jobs.cli", "stop", "--checkpoint-dir", f"file://{ckpt}"],
                       check=True, cwd=REPO)
        assert driver.proc.wait(timeout=180) == 0, driver.log.read_text(errors="replace")[-4000:]
    finally:
        if driver is not None and driver.proc.poll() is None:
            killpg(driver.proc)
        cluster.stop()
    at = cps[("up", 1)].applied_epoch
    rows = [(o.epoch, json.loads(o.value)) for o in read_output(kafka_bootstrap, f"{job}.output")[0]]
    assert {r["v"] for e, r in rows if e < at} == {"1"} and {r["v"] for e, r in rows if e >= at} == {"2"}
    assert any(e >= at for e, _ in rows), "version 2 answered"
    last = {r["key"]: r["count"] for _, r in sorted(rows, key=lambda x: x[0])}
    assert last == {k.decode(): n for k, n in Counter(keys).items()}, "exact counts across the upgrade"
