"""A job that keeps nothing on local disk: Spark's checkpoint (offsets, commits, sources), Ballast's
journal beside it and the durable state all on a real S3-compatible server (s3s-fs, `s3_server`),
written `s3://` as users write it (Spark reads it as `s3a://` through Hadoop's S3A, with the jars
`make setup` fetches; spark_jobs.storage, spark_jobs.session). The key-count job, run through the CLI,
is SIGKILLed inside a worker before its store commits, in the driver before an epoch's manifest
(Spark's offsets of the epoch on S3, its commit not), and inside a worker right after its Kafka
transaction committed; restarted from the checkpoint on S3 each time, then run to the end and
stopped with SIGTERM. A plain
`read_committed` consumer sees every expected output exactly once, the state equals the
reference, and no checkpoint file exists on local disk."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import parse_id, record_id, scan_topic
from spark_jobs.runner import ensure_job_topics
from tests.helpers.dp_helpers import check_state, produce, reference_by_epoch, zipf_keys
from tests.helpers.kill_runs import cli_env, final_run, killed_runs

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BINS = 16
N_RECORDS = 16_000
N_KEYS = 4_000
#: what Spark's checkpoint and Ballast's journal are made of (spark_jobs.journal)
CHECKPOINT_NAMES = {"offsets", "commits", "sources", "metadata", "job.json", "decisions", "ballast", "spark"}


def test_checkpoint_and_state_on_s3_survive_kills_exactly_once(kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                               db_url, s3_server):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    produce(kafka_bootstrap, topic, zipf_keys(N_RECORDS, N_KEYS, seed=29), 4)
    ensure_job_topics(kafka_bootstrap, job, 2)
    ckpt, state_uri = f"s3://ballast/{job}/ckpt", f"s3://ballast/{job}/state"
    spark_ckpt = f"{ckpt}/spark"
    faults_file, logs = tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", "keycount",
           "--input-topic", topic, "--bins", str(BINS), "--workers", "2", "--checkpoint-dir", ckpt,
           "--state-uri", state_uri, "--cache-dir", str(tmp_path / "cache"), "--bootstrap", kafka_bootstrap,
           "--db-url", db_url, "--trigger-ms", "200", "--max-offsets-per-trigger", "1500"]
    env = cli_env(faults_file)

    # an executor killed before its commit and the driver killed before the epoch's manifest: both
    # restart from Spark's offsets and commits on S3 (the output-side kill points run on local disk
    # in test_txn_exactly_once; a third restart here cost ~90 s of the suite and covered no S3 path)
    killed_runs(cmd, env, logs, faults_file, tick=lambda: None, rng=random.Random(31),
                faults=("worker_before_commit 3", "before_manifest 2"))

    def done() -> bool:
        eps = committed_epochs(spark_ckpt)
        end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
        return bool(end) and sum(end.get(topic, {}).values()) == N_RECORDS

    final_run(cmd, env, logs / "final.log", done, timeout_s=600)
    text = "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob("*.log")))
    assert f'"spark_checkpoint": "{spark_ckpt}"' in text, "the job names its checkpoint as the user wrote it"

    # Spark's log, Ballast's journal and the state are objects on the server ...
    on_server = s3_server.data / "ballast" / job
    epochs = committed_epochs(spark_ckpt)
    assert len(epochs) >= 3
    assert sorted(int(p.name) for p in (on_server / "ckpt" / "spark" / "commits").iterdir()
                  if p.name.isdigit()) == epochs
    assert (on_server / "ckpt" / "spark" / "metadata").is_file()
    assert (on_server / "ckpt" / "ballast" / "job.json").is_file()
    assert any(p.is_file() for p in (on_server / "state").rglob("*"))
    # ... and nothing of a checkpoint is on local disk: not under the test's dir (where the caches
    # are, rebuildable and checked against the state), nor a `s3:` / `s3a:` path relative to the cwd
    local = [p for p in tmp_path.rglob("*") if p.name in CHECKPOINT_NAMES]
    assert not local, f"checkpoint files on local disk: {local[:5]}"
    assert not (REPO / "s3:").exists() and not (REPO / "s3a:").exists()

    # exactly once: a plain read_committed consumer sees each expected output once
    ref_counts, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, spark_ckpt, epochs)  # type: ignore[arg-type]
    committed = Counter((parse_id(record_id(msg))[0], msg.key, int(msg.value)) for msg in scan_topic(
        kafka_bootstrap, f"{job}.output", 120.0, isolation_level="read_committed", consumer_timeout_ms=1000))
    assert max(committed.values()) == 1, "read_committed: an output twice"
    assert set(committed) == ref_outputs, (f"{len(set(committed) - ref_outputs)} unexpected, "
                                           f"{len(ref_outputs - set(committed))} missing outputs")
    check_state(state_uri, 2, [b % 2 for b in range(BINS)], BINS, ref_counts)
    requests = s3_server.request_counts()
    print(f"epochs={len(epochs)} S3 requests per committed epoch (kills and restarts included): "
          f"{ {op: round(n / len(epochs), 1) for op, n in sorted(requests.items())} }")
