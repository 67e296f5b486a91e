"""What durable state on an object store costs in requests: the key-count job with `--state-uri
s3://...` on a real S3-compatible server (s3s-fs, started here with request logging), its requests
per committed epoch by operation, and what they would cost at a public cloud's S3 prices:

    python -m bench.s3_requests --bootstrap 127.0.0.1:9092 [--records 120000] [--per-epoch 5000]

Counts are taken between the end of epoch `--skip` (start-up: job.json, the first manifests) and the
last committed epoch, on a steady load without moves; docs/operations.md ("State on an object
store") has a run's figures.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

#: USD per 1 000 requests, AWS S3 Standard (us-east-1): PUT, COPY, POST, LIST; GET, HEAD and the
#: rest; DELETE is free
PRICE_PER_1000 = {"write_list": 0.005, "read": 0.0004}
WRITE_LIST = {"PutObject", "CopyObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
              "ListObjectsV2", "ListObjects", "ListBuckets"}
FREE = {"DeleteObject", "DeleteObjects"}


def cost_per_epoch(per_epoch: dict[str, float]) -> float:
    """USD per epoch at PRICE_PER_1000."""
    usd = 0.0
    for op, n in per_epoch.items():
        if op in FREE:
            continue
        usd += n * PRICE_PER_1000["write_list" if op in WRITE_LIST else "read"] / 1000
    return usd


def main(argv: list[str] | None = None) -> int:
    from kafka import KafkaProducer
    from stack_procs import free_port
    from stack_s3 import S3Server

    from ballast.topics import create_missing_topics
    from spark_jobs.offsets import committed_epochs

    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--records", type=int, default=120_000)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--per-epoch", type=int, default=5_000)
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("--skip", type=int, default=3, help="start-up epochs left out of the counts")
    a = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="s3req-"))
    srv = S3Server(work, free_port(), log_requests=True)
    srv.up()
    topic = f"s3req-in-{uuid.uuid4().hex[:6]}"
    create_missing_topics(a.bootstrap, {topic: 4})
    p = KafkaProducer(bootstrap_servers=a.bootstrap, linger_ms=20, batch_size=256 * 1024, acks="all")
    for i in range(a.records):
        p.send(topic, key=b"user-%06d" % (i * 7919 % a.keys), value=b"1", partition=i % 4)
    p.flush(timeout=120)
    p.close()
    job = f"s3req-{uuid.uuid4().hex[:6]}"
    ckpt = work / "ckpt"
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", "keycount", "--input-topic",
           topic, "--bins", "64", "--workers", "2", "--checkpoint-dir", str(ckpt), "--state-uri",
           f"s3://ballast/{job}/state", "--bootstrap", a.bootstrap, "--db-url", f"sqlite:///{work / 'm.db'}",
           "--trigger-ms", str(a.trigger_ms), "--max-offsets-per-trigger", str(a.per_epoch)]
    env = {**os.environ, **srv.env(), "BALLAST_SPARK_LOG_LEVEL": "ERROR"}
    expected = a.records // a.per_epoch
    log_path = work / "job.log"
    start: tuple[int, Counter[str]] | None = None
    proc: subprocess.Popen[bytes] | None = None
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        deadline = time.time() + 900
        while time.time() < deadline:
            eps = committed_epochs(ckpt / "spark") if (ckpt / "spark").exists() else []
            if start is None and len(eps) >= a.skip:
                start = (len(eps), srv.request_counts())
                print(f"counting from epoch {len(eps)}", flush=True)
            if len(eps) >= expected:
                break
            if proc.poll() is not None:
                raise RuntimeError(log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        end = (len(committed_epochs(ckpt / "spark")), srv.request_counts())
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        srv.down()
    assert start is not None and end[0] > start[0], "no epochs counted"
    n = end[0] - start[0]
    per_epoch = {op: c / n for op, c in sorted((end[1] - start[1]).items())}
    usd = cost_per_epoch(per_epoch)
    print(f"{n} epochs counted ({a.per_epoch} records each, 64 bins, 2 workers, trigger {a.trigger_ms} ms)")
    for op, v in per_epoch.items():
        print(f"  {op:24s} {v:6.1f} per epoch")
    print(f"  at AWS S3 Standard prices: ${usd * 1e6:.1f} per million epochs; "
          f"${usd * 86_400_000 / a.trigger_ms:.2f} per day at one epoch every {a.trigger_ms} ms")
    print(f"logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
