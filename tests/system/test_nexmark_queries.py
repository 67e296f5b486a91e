"""NEXMark Q1-Q8 (spark_jobs.nexmark) run by the CLI on generated events in the writer's three
topics: each job's deduplicated output is, as a multiset of rows, bench.nexmark.reference's
answer on the same events (a missing, extra or repeated row fails). The stateful queries run
through an 8-step batched migration of their bins — of both operators of the Q4/Q6 chain — and a
SIGKILL of the driver's process group at a random moment while the steps are sent, then to the end.

Q4/Q6: the first operator's output (the hand-off topic, deduplicated) is exactly the reference's
winners; every update the second operator emits is an answer row, and which updates exist depends
on how the winners fell into its epochs, so the expected updates are the reference's
`q4_updates`/`q6_updates` over the epochs it actually read (its Spark offset log on the
hand-off topic), whose last update per key is the reference's final answer.

The events carry a tied bid at each window's top price (tests.helpers.nexmark.with_ties). Flush
events (a person, an auction and a bid that match nothing, far in event time) are written once
everything else was consumed. A processor's watermark follows the rows it reads (after its
`where`), so there is one of each kind: whichever kinds a query reads, they move its watermark
past every window and auction of the real events without being answered themselves (their
window never closes, the auction never expires), and the reference is taken with
until_ms = their time - lateness.

The final run stops at the reference's answer, or once it is quiet (every input row read, the
plans applied, no new output for QUIET_S): a wrong answer fails in seconds with its diff.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ballast.topics import handoff_topic
from bench.nexmark import reference
from bench.nexmark.model import kind_of
from bench.nexmark.writer import topics
from spark_jobs.nexmark import topics as input_topics
from spark_jobs.offsets import committed_epochs, epoch_ranges, read_end_offsets
from spark_jobs.operator_loader import get_operator
from spark_jobs.output import read_output, record_id, scan_topic
from spark_jobs.run_config import read_topics
from spark_jobs.runner import ensure_job_topics
from tests.helpers.dp_helpers import plan_maps, steps_from_maps
from tests.helpers.kill_runs import StepSender, check_plan_applied, cli_env, final_run, killed_runs
from tests.helpers.nexmark import PARTITIONS, flush_events, nexmark_events, until_ms, write

pytestmark = [pytest.mark.nexmark, pytest.mark.dataplane, pytest.mark.slow]

BINS = 16
MOD = "spark_jobs.nexmark"
#: query -> the --operator values (a chain: name=path, every operator is migrated)
QUERIES = {
    "q1": [f"{MOD}.stateless:Q1"], "q2": [f"{MOD}.stateless:Q2"], "q3": [f"{MOD}.q3:Q3"],
    "q4": [f"winners={MOD}.winning:WinningBids", f"q4={MOD}.winning:CategoryAverage"],
    "q5": [f"{MOD}.windows:Q5"],
    "q6": [f"winners={MOD}.winning:WinningBids", f"q6={MOD}.winning:SellerAverage"],
    "q7": [f"{MOD}.windows:Q7"], "q8": [f"{MOD}.q8:Q8"],
}
#: the chains' second operators: their updates given the batches of winners they read
UPDATES = {"q4": reference.q4_updates, "q6": reference.q6_updates}
STATELESS = ("q1", "q2")
QUIET_S = 20.0


def handoff_batches(bootstrap: str, topic: str, spark_ckpt: Path) -> list[list[dict[str, Any]]]:
    """The winners a chain's second operator read from the hand-off `topic`, per epoch it committed
    (its Spark offset log), without the copies a replayed upstream epoch re-emitted (a ballast-id
    already taken is dropped, as spark_jobs.inputs drops it)."""
    epochs = committed_epochs(spark_ckpt)  # before the topic is read: their records are all in it
    assert epochs == list(range(len(epochs))), f"{spark_ckpt}: committed epochs not 0..n: {epochs}"
    at = {(m.partition, m.offset): m for m in scan_topic(bootstrap, topic, 60.0, consumer_timeout_ms=1000)}
    taken: set[bytes | None] = set()
    batches = []
    for e in epochs:
        ranges = epoch_ranges(spark_ckpt, e)
        assert ranges is not None, f"{spark_ckpt}: the offsets of epoch {e} are gone"
        batch = []
        for p, (start, end) in sorted(ranges.get(topic, {}).items()):
            for off in range(start, end):
                m = at.get((p, off))
                if m is None:  # a transaction's commit or abort marker takes an offset (transactional output)
                    continue
                if record_id(m) not in taken:
                    taken.add(record_id(m))
                    batch.append(json.loads(m.value))
        batches.append(batch)
    return batches


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_query_output_equals_reference(query, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    job = unique_name
    make_topics({t: PARTITIONS for t in topics(job).values()})
    evs = nexmark_events()
    write(kafka_bootstrap, job, evs)
    flush = flush_events(evs)
    until = {} if query in ("q1", "q2", "q3") else {"until_ms": until_ms(flush)}
    answer = reference.QUERIES[query](evs + flush, **until)
    ensure_job_topics(kafka_bootstrap, job, 2)
    ops = QUERIES[query]
    names = [op.partition("=")[0] for op in ops]  # a single operator's name is its --operator value
    ckpt_dir, faults_file, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, *[a for op in ops for a in ("--operator", op)],
           "--input-topic", input_topics(job), "--bins", str(BINS), "--workers", "2", "--checkpoint-dir",
           str(ckpt_dir), "--bootstrap", kafka_bootstrap, "--db-url", db_url, "--trigger-ms", "200",
           "--max-offsets-per-trigger", "600"]
    env = cli_env(faults_file)

    def spark_ckpt(name: str) -> Path:
        return (ckpt_dir / name if len(ops) > 1 else ckpt_dir) / "spark"

    stateful = query not in STATELESS
    plans = {name: (pid, steps_from_maps(job, name, pid, BINS, plan_maps(BINS)))
             for name, pid in ((n, f"plan-{query}-{i + 1}") for i, n in enumerate(names))} if stateful else {}
    senders = [StepSender(kafka_bootstrap, job, name, steps, spark_ckpt(name), db_url)
               for name, (_, steps) in plans.items()]
    # the first operator subscribes only to the topics its query reads (`sources`), as Spark's own query does
    first_path = ops[0].partition("=")[2] if len(ops) > 1 else ops[0]
    reads = set(read_topics(input_topics(job).split(","), get_operator(first_path).sources(), first_path))
    n_evs, n_flush = (sum(topics(job)[kind_of(e)] in reads for e in es) for es in (evs, flush))
    won = reference.winners(evs + flush, **until) if query in UPDATES else []
    expected = answer  # Q4/Q6: the updates over the epochs the second operator read, as they are read
    flushed = False

    def tick() -> None:
        for s in senders:
            s()

    def consumed() -> int:
        ckpt = spark_ckpt(names[0])
        eps = committed_epochs(ckpt)
        end: dict[str, dict[str, int]] = (read_end_offsets(ckpt, eps[-1]) if eps else None) or {}
        return sum(n for t in topics(job).values() for n in end.get(t, {}).values())

    def outputs() -> list[dict]:
        return [json.loads(o.value) for o in read_output(kafka_bootstrap, f"{job}.output")[0]]

    def problem(got: list[dict]) -> str | None:
        """What `got` lacks or has too much of (None: it is the reference's answer)."""
        nonlocal expected
        if query in UPDATES:
            handoff = handoff_topic(job, names[0])
            batches = handoff_batches(kafka_bootstrap, handoff, spark_ckpt(names[1]))
            for what, rows in (("the first operator's output", [json.loads(o.value) for o in
                                                                read_output(kafka_bootstrap, handoff)[0]]),
                               ("what the second operator read", [w for b in batches for w in b])):
                if (p := reference.diff("winners", won, rows)) is not None:
                    return f"{what}: {p}"
            expected = UPDATES[query](batches)
        return reference.diff(query, expected, got)

    if stateful:
        killed_runs(cmd, env, logs, faults_file, tick, random.Random(sum(map(ord, query))), faults=(None,))

    seen, since = (-1, -1), time.time()  # (rows read, output rows) and when they last changed

    def done() -> bool:
        nonlocal flushed, seen, since
        tick()
        read = consumed()
        if not flushed and read == n_evs:
            write(kafka_bootstrap, job, flush)
            flushed = True
        if not (flushed and all(s.all_applied for s in senders)):
            return False
        got = outputs()
        if problem(got) is None:
            return True
        if (read, len(got)) != seen:
            seen, since = (read, len(got)), time.time()
        # every row read, nothing new for QUIET_S and still wrong: the assertion below shows the diff
        return read == n_evs + n_flush and time.time() - since > QUIET_S

    t0 = time.time()
    final_run(cmd, env, logs / "final.log", done, timeout_s=420, linger_s=2.0)
    for name, (plan_id, steps) in plans.items():
        check_plan_applied(db_url, job, plan_id, steps, name)
    got = outputs()
    trouble = problem(got)
    assert trouble is None, trouble
    assert expected, "the reference has no rows: the test would prove nothing"
    if query in UPDATES:  # the run's updates end at the answer over every closed auction
        assert reference.last_per_key(query, expected) == reference.last_per_key(query, answer)
    print(f"{query}: {len(expected)} reference rows, {len(got)} output rows, operators migrated {list(plans)}, "
          f"final run {time.time() - t0:.0f}s")
