"""Shared helpers of the data-plane tests: deterministic input, plans as control steps, oracles.

Waiting, control writes and process kills are shared by every test area: tests/helpers."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from sqlalchemy import select

from ballast.protocol import ControlStep, Move
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import bin_of_store_key, decode_entry, uniform_assignment
from spark_jobs.durable import read_state
from spark_jobs.offsets import committed_epochs, epoch_ranges, read_end_offsets
from spark_jobs.operators import decode_count

# the shared wait, control write and kill live in tests/helpers; named here too because data-plane
# tests (some being written now) import them from this module
from tests.helpers.control import send_control as send_control
from tests.helpers.procs import killpg as killpg
from tests.helpers.wait import wait_until as wait_until


def zipf_keys(n_records: int, n_keys: int, seed: int = 1, s: float = 1.1) -> list[bytes]:
    """Every one of n_keys keys once, the rest Zipf(s)-distributed over them; shuffled, seeded."""
    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** s for r in range(n_keys)]
    names = [b"user-%06d" % i for i in range(n_keys)]
    rng.shuffle(names)  # hot keys spread over the hash space
    recs = list(names) + rng.choices(names, weights=weights, k=n_records - n_keys)
    rng.shuffle(recs)
    return recs


def produce(bootstrap: str, topic: str, keys: list[bytes], partitions: int, values: list[bytes] | None = None) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024, acks="all")
    for i, k in enumerate(keys):
        p.send(topic, key=k, value=values[i] if values else b"1", partition=i % partitions)
    p.flush(timeout=120)
    p.close()


def read_topic(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple[bytes | None, bytes]]:
    """(partition, offset) -> (key, value) of everything now in `topic`."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, max_poll_records=10000)
    parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    end = c.end_offsets(parts)
    out = {}
    deadline = time.time() + 120
    while any(c.position(tp) < end[tp] for tp in parts) and time.time() < deadline:
        for tp, msgs in c.poll(timeout_ms=500).items():
            for msg in msgs:
                out[(tp.partition, msg.offset)] = (msg.key, msg.value)
    c.close()
    return out


def read_json_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    recs = read_topic(bootstrap, topic)
    return [json.loads(v) for _, (_, v) in sorted(recs.items())]


def plan_maps(bins: int) -> list[tuple[int, list[int]]]:
    """A ≥8-step plan as (workers, assignment) after each step: W 2→3→2, more than half the bins moved."""
    a = uniform_assignment(bins, 2)
    maps: list[tuple[int, list[int]]] = []
    rng = random.Random(5)
    # steps 1-3: grow to 3 workers, feeding worker 2 from both
    w0 = [b for b in range(bins) if a[b] == 0]
    w1 = [b for b in range(bins) if a[b] == 1]
    rng.shuffle(w0)
    rng.shuffle(w1)
    chunk = max(bins // 16, 1)
    for i in range(3):
        a = list(a)
        for b in w0[i * chunk:(i + 1) * chunk] + w1[i * chunk:(i + 1) * chunk]:
            a[b] = 2
        maps.append((3, a))
    # steps 4-5: swap bins between workers 0 and 1 (rebalance)
    for i in range(2):
        a = list(a)
        for b in w0[(3 + i) * chunk:(4 + i) * chunk]:
            a[b] = 1
        for b in w1[(3 + i) * chunk:(4 + i) * chunk]:
            a[b] = 0
        maps.append((3, a))
    # steps 6-8: drain worker 2 to 0 and 1, then shrink to 2 workers
    on2 = sorted(b for b in range(bins) if a[b] == 2)
    thirds = [on2[0::3], on2[1::3], on2[2::3]]
    for i, part in enumerate(thirds):
        a = list(a)
        for j, b in enumerate(part):
            a[b] = (b + j) % 2
        maps.append((2 if i == 2 else 3, a))
    return maps


def steps_from_maps(job: str, operator: str, plan_id: str, bins: int, maps: list[tuple[int, list[int]]],
                    start_version: int = 0, effective_at: datetime | None = None,
                    start_workers: int = 2) -> list[ControlStep]:
    prev = uniform_assignment(bins, start_workers)
    now = datetime.now(UTC)
    out = []
    for i, (w, a) in enumerate(maps):
        moves = tuple(Move(b, prev[b], a[b]) for b in range(bins) if prev[b] != a[b])
        out.append(ControlStep(job=job, operator=operator, plan_id=plan_id, step=i + 1, steps=len(maps),
                               kind="moves" if moves else "map", moves=moves, workers=w,
                               map_version=start_version + i, issued_at=now, effective_at=effective_at or now,
                               reason=f"test step {i + 1}"))
        prev = a
    return out


def checkpoints(db_url: str, job: str, operator: str | None = None) -> dict[tuple[str, int], m.StepCheckpoint]:
    """(plan, step) -> checkpoint of the job's steps (of `operator`'s only, when given: each operator
    of a chain has its own plans)."""
    mine = [m.StepCheckpoint.operator == operator] if operator else []
    with session_scope(db_url) as s:
        return {(c.plan_id, c.step): c
                for c in s.scalars(select(m.StepCheckpoint).where(m.StepCheckpoint.job == job, *mine))}


def reference_by_epoch(bootstrap: str, input_topic: str, spark_ckpt: Path, epochs: list[int]) -> tuple[Counter, set]:
    """Pure-Python key count without migration, cut at the job's own epoch boundaries.

    Returns (final count per key, expected outputs {(epoch, key, count)}): KeyCount emits one
    (key, count) per key present in an epoch.
    """
    recs = read_topic(bootstrap, input_topic)
    counts: Counter = Counter()
    expected = set()
    for e in sorted(epochs):
        r = epoch_ranges(spark_ckpt, e)
        assert r is not None, f"offset log of epoch {e} missing"
        seen = Counter()
        for p, (s, end) in r.get(input_topic, {}).items():
            for off in range(s, end):
                k, _ = recs[(p, off)]
                seen[k] += 1
        for k, n in seen.items():
            counts[k] += n
            expected.add((e, k, counts[k]))
    return counts, expected


def check_state(state_uri: str, workers: int, final_assignment: list[int], bins: int, expected: Counter) -> None:
    """The durable state after the last committed epoch == expected counts (each key once, in
    its own bin); `workers`/`final_assignment` bound the map the job ended with."""
    k = bins.bit_length() - 1
    assert max(final_assignment) < max(workers, 1) or workers == 0
    got: dict[bytes, int] = {}
    for b, kv in read_state(state_uri).items():
        for sk, v in kv.items():
            key, st = decode_entry(sk, v)
            assert key not in got, f"key {key!r} stored twice"
            assert bin_of_store_key(sk, k) == b, f"key {key!r} filed under bin {b}"
            got[key] = decode_count(st)
    assert got == dict(expected), _diff(got, expected)


def _diff(got: dict[bytes, int], exp: Counter) -> str:
    missing = [k for k in exp if k not in got][:5]
    extra = [k for k in got if k not in exp][:5]
    wrong = [(k, got[k], exp[k]) for k in exp if k in got and got[k] != exp[k]][:5]
    return f"state differs: {len(got)} vs {len(exp)} keys; missing {missing} extra {extra} wrong {wrong}"


def check_migration_property(db_url: str, job: str, operator: str | None = None) -> int:
    """Every bin's records at epoch e were applied by map(e, bin)'s worker. Returns rows checked.
    `operator`: that operator's maps and bins only (a multi-operator job has one map per operator)."""
    def mine(model: Any) -> Any:
        return select(model).where(model.job == job, *([model.operator == operator] if operator else []))

    with session_scope(db_url) as s:
        maps = sorted(s.scalars(mine(m.RoutingMap)), key=lambda r: r.map_version)
        rows = list(s.scalars(mine(m.BinMetrics)))
    assert maps and maps[0].map_version == 0
    versions = [r.map_version for r in maps]
    assert versions == list(range(len(versions))), f"map versions not consecutive: {versions}"
    for r in rows:
        in_force = [mp for mp in maps if mp.epoch <= r.epoch][-1]
        assert in_force.assignment[r.bin] == r.worker, (
            f"epoch {r.epoch} bin {r.bin}: applied by worker {r.worker}, map v{in_force.map_version} says "
            f"{in_force.assignment[r.bin]}")
    return len(rows)


def outputs_as_set(outs: list[Any]) -> set[tuple[int, bytes, int]]:
    return {(o.epoch, o.key, int(o.value)) for o in outs}


def future(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def read_output_bounded(bootstrap: str, topic: str, keep_epochs: int = 3) -> list[Any]:
    """`<job>.output` read as docs/dataplane.md's bounded consumer does ("Outputs: the consumer
    rule"): per partition, only the ids of epochs >= (highest epoch seen there - keep_epochs + 1)
    are remembered, a record whose id is remembered is dropped and any other one is kept (an id
    of an older epoch has been forgotten, so a replay of it would be kept twice). Returns the kept
    records, sorted as read_output's: equal to read_output's deduplicated list exactly when every
    replay duplicate was dropped."""
    from spark_jobs.output import OutputRecord, parse_id, record_id, scan_topic

    top: dict[int, int] = {}
    seen: dict[int, dict[int, set[tuple[int, int, int]]]] = {}  # partition -> epoch -> ids
    kept: list[OutputRecord] = []
    for msg in scan_topic(bootstrap, topic, 60.0, consumer_timeout_ms=1000, max_poll_records=5000):
        rid = parse_id(record_id(msg))  # type: ignore[arg-type]
        p = msg.partition
        top[p] = max(top.get(p, rid[0]), rid[0])
        remembered = seen.setdefault(p, {})
        for e in [e for e in remembered if e < top[p] - keep_epochs + 1]:
            del remembered[e]  # forgotten: the bounded seen-set
        if rid[0] >= top[p] - keep_epochs + 1:
            ids = remembered.setdefault(rid[0], set())
            if rid in ids:
                continue
            ids.add(rid)
        kept.append(OutputRecord(*rid, msg.key, msg.value))
    return sorted(kept)


def check_acks_follow_commits(bootstrap: str, db_url: str, job: str) -> int:
    """Every `applied` ack now on `<job>.control.acks` finds its epoch committed in the metrics DB:
    its `checkpoints` row (applied, same epoch and map version), its epoch's metrics row and its
    `routing_maps` version, which the heartbeat has reached. Returns how many acks were checked."""
    from ballast.protocol import acks_topic

    acks = [a for a in read_json_topic(bootstrap, acks_topic(job)) if a.get("status") == "applied"]
    if not acks:
        return 0
    cps = checkpoints(db_url, job)
    with session_scope(db_url) as s:
        versions = {r.map_version for r in s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job))}
        epochs = {r.epoch for r in s.scalars(select(m.EpochMetrics).where(m.EpochMetrics.job == job))}
        hb = max((h.map_version for h in s.scalars(select(m.Heartbeat).where(m.Heartbeat.job == job))), default=-1)
    for a in acks:
        what = f"ack of step {a['plan_id']}#{a['step']} (epoch {a['applied_epoch']}, map v{a['map_version_after']})"
        row = cps.get((a["plan_id"], a["step"]))
        assert row is not None, f"{what} is on the acks topic but its checkpoint row is not committed"
        assert (row.status, row.applied_epoch, row.map_version_after) == \
            ("applied", a["applied_epoch"], a["map_version_after"]), f"{what}: the row says {row.status}"
        assert a["applied_epoch"] in epochs, f"{what}: its epoch's metrics are not committed"
        assert a["map_version_after"] in versions, f"{what}: routing map v{a['map_version_after']} is not committed"
        assert hb >= a["map_version_after"], f"{what}: the heartbeat is at map v{hb}"
    return len(acks)


def consumed_rows(spark_ckpt: str | Path, topic: str) -> int:
    """Rows of `topic` the job's last committed epoch has read up to (its Spark offset log)."""
    eps = committed_epochs(spark_ckpt)
    end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
    return sum((end or {}).get(topic, {}).values())


def check_exact(bootstrap: str, topic: str, spark_ckpt: str, job: str, state_uri: str, workers: int,
                final: list[int], bins: int) -> None:
    """A keycount job's outputs equal the reference of its committed epochs (each once) and its
    durable state equals the reference counts at the final map."""
    from spark_jobs.output import read_output

    ref_counts, ref_outputs = reference_by_epoch(bootstrap, topic, spark_ckpt, committed_epochs(spark_ckpt))
    outs, _ = read_output(bootstrap, f"{job}.output")
    got = outputs_as_set(outs)
    assert len(got) == len(outs), "one output per (epoch, key)"
    assert got == ref_outputs, f"{len(got ^ ref_outputs)} outputs differ from the reference"
    check_state(state_uri, workers, final, bins, ref_counts)
