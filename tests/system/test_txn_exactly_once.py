"""Transactional output (spark_jobs.txn_output), end to end: a keyed job (key count whose fold
raises on poison records, so it writes dead letters too) run through the CLI is SIGKILLed inside
a task's Kafka transaction, right after a task's Kafka commit, before the manifest, inside a
worker before its cache commits, and twice at random moments, while a plan moves bins W 2 → 3 → 2.
After restarts from its checkpoint, a plain `read_committed` consumer WITHOUT deduplication sees
every expected output and dead letter exactly once (0 lost, 0 doubled); the same topics read
`read_uncommitted` hold the aborted copies (so the kills did leave duplicates a transaction hides)."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from spark_jobs.offsets import committed_epochs, epoch_ranges, read_end_offsets
from spark_jobs.output import parse_id, record_id, scan_topic
from spark_jobs.runner import ensure_job_topics
from spark_jobs.txn_output import commits_topic
from spark_jobs.txn_slots import Marker
from tests.helpers.dp_helpers import check_state, plan_maps, produce, read_topic, steps_from_maps, zipf_keys
from tests.helpers.kill_runs import StepSender, check_plan_applied, cli_env, final_run, killed_runs

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent  # poison_operator.py
BINS = 32
N_RECORDS = 40_000
N_KEYS = 12_000
POISON_EVERY = 211
OP = "poison_operator:PoisonCount"


def _reference(bootstrap: str, topic: str, spark_ckpt: Path, epochs: list[int]) -> tuple[Counter, set, set]:
    """Key counts, expected outputs {(epoch, key, count)} and dead letters {topic:partition:offset},
    as PoisonCount folds each epoch: a key's values in (partition, offset) order; a key with a
    poison value is folded one value at a time (one output per good value, a dead letter per poison)."""
    recs = read_topic(bootstrap, topic)
    counts: Counter = Counter()
    outputs: set = set()
    dead: set = set()
    for e in sorted(epochs):
        r = epoch_ranges(spark_ckpt, e)
        assert r is not None, f"offset log of epoch {e} missing"
        by_key: dict[bytes, list[tuple[int, int, bytes]]] = {}
        for p, (s, end) in r.get(topic, {}).items():
            for off in range(s, end):
                k, v = recs[(p, off)]
                by_key.setdefault(k, []).append((p, off, v))  # type: ignore[arg-type]
        for k, rows in by_key.items():
            rows.sort()
            if any(v == b"poison" for _, _, v in rows):
                for p, off, v in rows:
                    if v == b"poison":
                        dead.add(f"{topic}:{p}:{off}".encode())
                    else:
                        counts[k] += 1
                        outputs.add((e, k, counts[k]))
            else:
                counts[k] += len(rows)
                outputs.add((e, k, counts[k]))
    return counts, outputs, dead


def _read(bootstrap: str, topic: str, isolation: str) -> list:
    return list(scan_topic(bootstrap, topic, 120.0, isolation_level=isolation, consumer_timeout_ms=1000,
                           max_poll_records=5000))


def test_read_committed_sees_every_output_once_across_kills(kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                             db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    keys = zipf_keys(N_RECORDS, N_KEYS, seed=31)
    values = [b"poison" if i % POISON_EVERY == 7 else b"1" for i in range(N_RECORDS)]
    produce(kafka_bootstrap, topic, keys, 4, values)
    ensure_job_topics(kafka_bootstrap, job, 2)  # the marker topic too
    maps = plan_maps(BINS)
    steps = steps_from_maps(job, OP, "plan-txn", BINS, maps)
    ckpt_dir = tmp_path / "ckpt"
    spark_ckpt = ckpt_dir / "spark"
    faults_file = tmp_path / "faults"
    logs = tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", OP, "--input-topic", topic,
           "--bins", str(BINS), "--workers", "2", "--checkpoint-dir", str(ckpt_dir), "--bootstrap", kafka_bootstrap,
           "--db-url", db_url, "--trigger-ms", "100", "--max-offsets-per-trigger", "2500"]
    env = cli_env(faults_file, HERE)
    sender = StepSender(kafka_bootstrap, job, OP, steps, spark_ckpt, db_url)
    killed_runs(cmd, env, logs, faults_file, sender, random.Random(37),
                faults=("worker_before_output_commit 2", "worker_after_output_commit 3", "before_manifest 2",
                        "worker_before_commit 3", None, None))

    def consumed() -> int:
        eps = committed_epochs(spark_ckpt)
        end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
        return sum((end or {}).get(topic, {}).values())

    final_run(cmd, env, logs / "final.log", lambda: (sender(), sender.all_applied)[1] and consumed() == N_RECORDS)
    check_plan_applied(db_url, job, "plan-txn", steps)

    epochs = committed_epochs(spark_ckpt)
    counts, expected, expected_dead = _reference(kafka_bootstrap, topic, spark_ckpt, epochs)
    assert expected_dead, "the input has poison records"

    # a plain read_committed consumer, no deduplication: every output exactly once
    committed = _read(kafka_bootstrap, f"{job}.output", "read_committed")
    got = Counter((parse_id(record_id(m))[0], m.key, int(m.value)) for m in committed)
    doubled = {o: n for o, n in got.items() if n > 1}
    assert not doubled, f"{len(doubled)} outputs seen more than once by read_committed, e.g. {next(iter(doubled))}"
    assert set(got) == expected, f"{len(set(got) - expected)} unexpected, {len(expected - set(got))} missing outputs"
    ids = Counter(record_id(m) for m in committed)
    assert max(ids.values()) == 1, "an output id seen twice by read_committed"
    # dead letters: each poison record once, with its source
    dlq = _read(kafka_bootstrap, f"{job}.dlq", "read_committed")
    sources = Counter(dict(m.headers)["ballast-source"] for m in dlq)
    assert max(sources.values()) == 1 and set(sources) == expected_dead, (len(sources), len(expected_dead))

    # not vacuous: the kills left copies that only a read_uncommitted reader sees (the transaction
    # killed before its commit), each a byte-identical copy of a committed record
    raw = _read(kafka_bootstrap, f"{job}.output", "read_uncommitted")
    assert len(raw) > len(committed), "no aborted copy: the kill inside the transaction did not happen"
    first = {record_id(m): (m.key, m.value) for m in committed}
    assert all(first.get(record_id(m)) == (m.key, m.value) for m in raw)
    markers = [Marker.decode(m.value) for m in _read(kafka_bootstrap, commits_topic(f"{job}.output"),
                                                     "read_committed")]
    assert markers and all(m is not None for m in markers)
    per_slot = Counter((m.epoch, m.worker) for m in markers if m is not None)
    assert max(per_slot.values()) == 1, "an (epoch, worker) committed twice"

    check_state(str(ckpt_dir / "state"), 3, maps[-1][1], BINS, counts)
    log_text = "".join((logs / f"run{i}.log").read_text(errors="replace") for i in range(6))
    print(f"epochs={len(epochs)} outputs={len(committed)} dead letters={len(dlq)} aborted copies="
          f"{len(raw) - len(committed)} markers={len(markers)} kills={log_text.count('killing pid')}")
