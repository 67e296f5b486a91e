"""What transactional output costs an epoch: the key-count job on the same input, once per
`--output-mode`, alternating, each from a fresh checkpoint, read from its `epoch N time ms:` lines
(spark_jobs.epoch_times):

    python -m bench.txn_cost --bootstrap 127.0.0.1:9092 [--records 200000] [--per-epoch 10000] [--rounds 2]

Prints, per mode and round, the medians over the epochs after the first two (start-up) of the
epoch's time inside `foreachBatch` (the sum of its phases) and of its `spark` phase (the Spark job
whose tasks fold and write the outputs), and the outputs per epoch.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_job(bootstrap: str, topic: str, mode: str, records: int, per_epoch: int, work: Path) -> list[dict[str, float]]:
    from spark_jobs.offsets import committed_epochs, read_end_offsets

    job = f"txncost-{mode[:3]}-{uuid.uuid4().hex[:6]}"
    ckpt = work / job
    db = f"sqlite:///{work / (job + '.db')}"
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", "keycount", "--input-topic",
           topic, "--bins", "64", "--workers", "2", "--checkpoint-dir", str(ckpt), "--bootstrap", bootstrap,
           "--db-url", db, "--trigger-ms", "100", "--max-offsets-per-trigger", str(per_epoch), "--output-mode", mode]
    log_path = work / f"{job}.log"
    env = {**os.environ, "BALLAST_SPARK_LOG_LEVEL": "ERROR"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.time() + 900
            while time.time() < deadline:
                eps = committed_epochs(ckpt / "spark") if (ckpt / "spark").exists() else []
                end = read_end_offsets(ckpt / "spark", eps[-1]) if eps else None
                if end and sum(end.get(topic, {}).values()) >= records:
                    break
                if proc.poll() is not None:
                    raise RuntimeError(log_path.read_text(errors="replace")[-3000:])
                time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    from spark_jobs.epoch_times import parse_log

    return [inside | {"total": sum(inside.values()), "epoch": float(e)}
            for e, (inside, _outside) in sorted(parse_log(log_path.read_text(errors="replace")).items())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--per-epoch", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    import random

    from kafka import KafkaProducer

    from ballast.topics import create_missing_topics

    topic = f"txncost-in-{uuid.uuid4().hex[:6]}"
    create_missing_topics(a.bootstrap, {topic: 4})
    rng = random.Random(3)
    names = [b"user-%06d" % i for i in range(a.keys)]
    weights = [1.0 / (r + 1) ** 1.1 for r in range(a.keys)]
    p = KafkaProducer(bootstrap_servers=a.bootstrap, linger_ms=20, batch_size=256 * 1024, acks="all")
    for i, k in enumerate(rng.choices(names, weights=weights, k=a.records)):  # Zipf(1.1) keys
        p.send(topic, key=k, value=b"1", partition=i % 4)
    p.flush(timeout=120)
    p.close()
    work = Path(tempfile.mkdtemp(prefix="txncost-"))
    print(f"input {topic}: {a.records} records, {a.keys} keys, {a.per_epoch} per epoch; logs in {work}")
    for r in range(a.rounds):
        for mode in ("at-least-once", "transactional"):
            eps = [e for e in run_job(a.bootstrap, topic, mode, a.records, a.per_epoch, work)
                   if e["epoch"] >= 2 and "spark" in e]
            total = statistics.median(e["total"] for e in eps)
            print(f"round {r} {mode:14s} epochs={len(eps):3d} median total {total:6.0f}"
                  f" ms, spark {statistics.median(e['spark'] for e in eps):6.0f} ms,"
                  f" mean total {statistics.mean(e['total'] for e in eps):6.0f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
