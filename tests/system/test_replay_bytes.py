"""Deterministic replays (issue 21): a replayed epoch's outputs are byte-identical to the first
attempt's, for the key-count operator and a processor, even when the replaying process runs under
another time zone. The job (CLI) is SIGKILLed after an epoch's outputs reached Kafka and before
its commit (`before_manifest`); its changelog objects are removed so that the restart recomputes
the epoch from the durable state (what an attempt that finds no object does: a speculative or
zombie attempt racing the first) instead of re-emitting the stored outputs; the restart runs under
another TZ. Every output id then appears twice in `<job>.output`, with the same key, value and
headers. The job runs with `--output-mode at-least-once` (Spark's Kafka sink), so that both copies
are in the topic to compare: a transactional job's replay finds its epoch's commit marker and
writes nothing (tests/system/test_txn_exactly_once.py)."""

from __future__ import annotations

import json
import random
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from spark_jobs.objects import epoch_name
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import ID_HEADER, scan_topic
from spark_jobs.runner import ensure_job_topics
from tests.helpers.dp_helpers import produce, zipf_keys
from tests.helpers.kill_runs import cli_env, final_run, killed_runs

pytestmark = [pytest.mark.dataplane, pytest.mark.slow, pytest.mark.faults]

HERE = Path(__file__).resolve().parent
FIRST_TZ, REPLAY_TZ = "America/New_York", "Asia/Kolkata"


def _records(name: str, n: int) -> tuple[list[bytes], list[bytes] | None, str]:
    """(keys, values, operator) of the job's input."""
    if name == "keycount":
        return zipf_keys(n, 300, seed=17), None, "keycount"
    rng = random.Random(23)
    keys, values = [], []
    for i in range(n):
        k = f"u{rng.randrange(60)}"
        # no zone in the string: it is read in the SQL session's zone
        ts = f"2026-03-{8 + i % 3:02d}T{i % 24:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{i % 1000:03d}"
        keys.append(k.encode())
        values.append(json.dumps({"id": k, "ts": ts, "seq": i}).encode())
    return keys, values, "tz_processor:Stamps"


@pytest.mark.parametrize("name", ["keycount", "processor"])
def test_a_replayed_epoch_emits_the_same_bytes_under_another_time_zone(name, kafka_bootstrap, make_topics,
                                                                      unique_name, tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    keys, values, operator = _records(name, 3_000)
    produce(kafka_bootstrap, topic, keys, 2, values)
    ensure_job_topics(kafka_bootstrap, job, 2)
    ckpt, faults_file, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", operator, "--input-topic", topic,
           "--bins", "16", "--workers", "2", "--checkpoint-dir", str(ckpt), "--bootstrap", kafka_bootstrap,
           "--db-url", db_url, "--trigger-ms", "100", "--max-offsets-per-trigger", "400",
           "--output-mode", "at-least-once"]
    env = cli_env(faults_file, HERE)

    # the first attempt: killed after the 3rd epoch with tasks wrote its outputs, before its commit
    killed_runs(cmd, {**env, "TZ": FIRST_TZ}, logs, faults_file, lambda: None, random.Random(1),
                faults=("before_manifest 3",))
    spark_ckpt = ckpt / "spark"
    last = max(committed_epochs(spark_ckpt), default=-1)
    changelog = ckpt / "state" / "changelog"
    replayed = sorted(int(d.name) for d in changelog.iterdir() if int(d.name) > last)
    assert replayed, f"no uncommitted epoch after the kill (committed up to {last}): {logs / 'run0.log'}"
    for e in replayed:  # recompute, do not re-emit (module docstring)
        shutil.rmtree(changelog / epoch_name(e))
        shutil.rmtree(ckpt / "state" / "snapshot" / epoch_name(e), ignore_errors=True)
    first = _outputs(kafka_bootstrap, f"{job}.output")
    assert {rid[0] for rid in first} >= set(replayed), f"the killed epochs {replayed} emitted nothing"

    def consumed() -> bool:
        eps = committed_epochs(spark_ckpt)
        return bool(eps) and sum(read_end_offsets(spark_ckpt, eps[-1]).get(topic, {}).values()) == len(keys)

    final_run(cmd, {**env, "TZ": REPLAY_TZ}, logs / "final.log", consumed)

    copies: dict[tuple[int, ...], list[tuple[bytes, bytes, list]]] = defaultdict(list)
    for msg in scan_topic(kafka_bootstrap, f"{job}.output", 60, consumer_timeout_ms=1000):
        rid = _rid(msg.headers)
        copies[rid].append((msg.key, msg.value, sorted(msg.headers)))
    twice = {rid: c for rid, c in copies.items() if rid[0] in replayed}
    assert twice and all(len(c) == 2 for c in twice.values()), {rid: len(c) for rid, c in twice.items()}
    differ = {rid: c for rid, c in twice.items() if c[0] != c[1]}
    assert not differ, f"{len(differ)} of {len(twice)} replayed outputs differ, e.g. {next(iter(differ.values()))}"
    assert all(len(c) == 1 for rid, c in copies.items() if rid[0] not in replayed)
    if name == "processor":  # the handler saw UTC: the same instant and hour as the input's text
        for _, value, _ in next(iter(twice.values())):
            row = json.loads(value)
            assert row["ts"].endswith("+00:00") and int(row["ts"][11:13]) == row["hour"], row
    print(f"{name}: epochs {replayed} replayed under TZ={REPLAY_TZ} (first TZ={FIRST_TZ}); "
          f"{len(twice)} outputs emitted twice, byte-identical; {len(copies)} outputs in all")


def _rid(headers: list[tuple[str, bytes]]) -> tuple[int, ...]:
    raw = dict(headers)[ID_HEADER]
    return tuple(int(x) for x in raw.decode().split(":"))


def _outputs(bootstrap: str, topic: str) -> dict[tuple[int, ...], bytes]:
    return {_rid(m.headers): m.value for m in scan_topic(bootstrap, topic, 60, consumer_timeout_ms=1000)}
