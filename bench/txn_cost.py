"""What transactional output costs an epoch: the key-count job on the same input, once per
`--output-mode`, alternating, each from a fresh checkpoint, read from its `epoch N time ms:` lines
(spark_jobs.epoch_times):

    python -m bench.txn_cost --bootstrap 127.0.0.1:9092 [--records 200000] [--per-epoch 10000] [--rounds 2]
    python -m bench.txn_cost --bootstrap 127.0.0.1:9092 --parts     # the parts alone, no Spark

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


def parts(bootstrap: str, n: int = 2000) -> None:
    """Medians of what transactional output's parts cost, against the broker alone: a new producer
    of a slot (init_transactions and the marker read), a marker read by the process's consumer, a
    transaction of `n` records by a cached producer, and the same records by a plain producer."""
    from kafka import KafkaProducer

    from ballast.topics import create_missing_topics
    from spark_jobs import txn_output as tx
    from spark_jobs import txn_slots as txs
    from spark_jobs.run_config import COMMITS_TOPIC_CONFIG

    name = f"txnparts-{uuid.uuid4().hex[:6]}"
    out, marks = f"{name}.output", tx.commits_topic(f"{name}.output")
    create_missing_topics(bootstrap, {out: 2, marks: 8}, configs={marks: COMMITS_TOPIC_CONFIG})
    t = txs.TxnTarget(bootstrap=bootstrap, job=name, operator="keycount", store_id="s", commits_topic=marks)
    recs: list[tx.Record] = [(out, b"user-%06d" % i, b"%d" % i, [("ballast-id", b"1:0:%d" % i)]) for i in range(n)]

    def ms(f: object) -> float:
        t0 = time.perf_counter()
        f()  # type: ignore[operator]
        return (time.perf_counter() - t0) * 1000

    tid = txs.transactional_id(name, "keycount", 0)
    init, read, txn, plain = [], [], [], []
    for _ in range(10):
        txs.drop(tid)
        init.append(ms(lambda: txs.slot(t, 0)))
        read.append(ms(lambda: txs.read_last_marker(t, 0)))
    for e in range(100, 120):
        txn.append(ms(lambda: tx.commit_outputs(t, e, 0, recs)))  # noqa: B023
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=512 * 1024)

    def send_all() -> None:
        for topic, k, v, h in recs:
            p.send(topic, key=k, value=v, headers=h)
        p.flush()

    for _ in range(20):
        plain.append(ms(send_all))
    p.close()
    txs.drop(tid)
    print(f"new producer (init_transactions + marker read) {statistics.median(init):.0f} ms; marker read "
          f"{statistics.median(read):.1f} ms; transaction of {n} records {statistics.median(txn):.0f} ms; "
          f"the same records by a plain producer {statistics.median(plain):.0f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--per-epoch", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parts", action="store_true", help="time the parts alone (no Spark job)")
    a = ap.parse_args(argv)
    if a.parts:
        parts(a.bootstrap)
        return 0
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
