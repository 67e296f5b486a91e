"""NEXMark Q1-Q8 (spark_jobs.nexmark) run by the CLI on generated events in the writer's three
topics: each job's deduplicated output equals bench.nexmark.reference on the same events. The
stateful queries run through an 8-step batched migration of their bins and a SIGKILL of the
driver's process group at a random moment while the steps are sent, then to the end.

Flush events (a person, an auction and a bid that match nothing, far in event time) are written
once everything else was consumed. A processor's watermark follows the rows it reads (after its
`where`), so there is one of each kind: whichever kinds a query reads, they move its watermark
past every window and auction of the real events without being answered themselves (their
window never closes, the auction never expires), and the reference is taken with
until_ms = their time - lateness.

The final run stops at the reference's answer, or once it is quiet (every input row read, the
plan applied, no new output for QUIET_S): a wrong answer fails in seconds with its diff.
"""

from __future__ import annotations

import json
import random
import sys
import time

import pytest

from bench.nexmark import reference
from bench.nexmark.generator import events
from bench.nexmark.model import Auction, Bid, Event, NexmarkConfig, Person, key_of, kind_of, to_json
from bench.nexmark.writer import topics
from spark_jobs.nexmark import LATENESS_MS, WINDOW_MS
from spark_jobs.nexmark import topics as input_topics
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import ensure_job_topics
from tests.helpers.dp_helpers import plan_maps, produce, steps_from_maps
from tests.helpers.kill_runs import StepSender, check_plan_applied, cli_env, final_run, killed_runs

pytestmark = [pytest.mark.nexmark, pytest.mark.dataplane, pytest.mark.slow]

BINS = 16
PARTITIONS = 2
EVENTS = 4000
CONFIG = NexmarkConfig(rate=100.0, seed=7)  # 40 s of event time: 4 tumbling, 8 sliding windows
MOD = "spark_jobs.nexmark"
#: query -> the --operator values (a chain: name=path, the first one is migrated)
QUERIES = {
    "q1": [f"{MOD}.stateless:Q1"], "q2": [f"{MOD}.stateless:Q2"], "q3": [f"{MOD}.q3:Q3"],
    "q4": [f"winners={MOD}.winning:WinningBids", f"q4={MOD}.winning:CategoryAverage"],
    "q5": [f"{MOD}.windows:Q5"],
    "q6": [f"winners={MOD}.winning:WinningBids", f"q6={MOD}.winning:SellerAverage"],
    "q7": [f"{MOD}.windows:Q7"], "q8": [f"{MOD}.q8:Q8"],
}
STATELESS = ("q1", "q2")
QUIET_S = 20.0


def flush_events(evs: list[Event]) -> list[Event]:
    """One event of each kind that matches nothing, late enough in event time that every window
    and auction of `evs` has closed once the watermark follows them."""
    last = max(max(e.date_time for e in evs), max(e.expires for e in evs if isinstance(e, Auction)))
    t = last + LATENESS_MS + 2 * WINDOW_MS
    return [Person(id=-2, name="", email_address="", credit_card="", city="", state="", date_time=t, extra=""),
            Auction(id=-1, item_name="", description="", initial_bid=0, reserve=0, date_time=t,
                    expires=t + 10 * WINDOW_MS, seller=-3, category=-1, extra=""),
            Bid(auction=-1, bidder=-1, price=0, date_time=t, extra="")]


def write(bootstrap: str, prefix: str, evs: list[Event]) -> None:
    """The events into the writer's topics (model.key_of keys, each kind's records round-robin)."""
    by_kind: dict[str, list[Event]] = {}
    for e in evs:
        by_kind.setdefault(kind_of(e), []).append(e)
    for kind, topic in topics(prefix).items():
        rows = by_kind.get(kind, [])
        produce(bootstrap, topic, [b"%d" % key_of(e) for e in rows], PARTITIONS, [to_json(e) for e in rows])


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_query_output_equals_reference(query, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    job = unique_name
    make_topics({t: PARTITIONS for t in topics(job).values()})
    evs = events(CONFIG, EVENTS)
    write(kafka_bootstrap, job, evs)
    flush = flush_events(evs)
    expected = reference.QUERIES[query](evs + flush, **({} if query in ("q1", "q2", "q3") else
                                                      {"until_ms": flush[0].date_time - LATENESS_MS}))
    ensure_job_topics(kafka_bootstrap, job, 2)
    ops = QUERIES[query]
    first = ops[0].partition("=")[0] if len(ops) > 1 else ops[0]
    ckpt_dir, faults_file, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, *[a for op in ops for a in ("--operator", op)],
           "--input-topic", input_topics(job), "--bins", str(BINS), "--workers", "2", "--checkpoint-dir",
           str(ckpt_dir), "--bootstrap", kafka_bootstrap, "--db-url", db_url, "--trigger-ms", "200",
           "--max-offsets-per-trigger", "600"]
    env = cli_env(faults_file)
    spark_ckpt = (ckpt_dir / first.partition("=")[0] if len(ops) > 1 else ckpt_dir) / "spark"
    steps = steps_from_maps(job, first, f"plan-{query}", BINS, plan_maps(BINS))
    sender = StepSender(kafka_bootstrap, job, first, steps, spark_ckpt, db_url)
    stateful = query not in STATELESS
    flushed = False

    def consumed() -> int:
        eps = committed_epochs(spark_ckpt)
        end: dict[str, dict[str, int]] = (read_end_offsets(spark_ckpt, eps[-1]) if eps else None) or {}
        return sum(n for t in topics(job).values() for n in end.get(t, {}).values())

    def outputs() -> list[dict]:
        return [json.loads(o.value) for o in read_output(kafka_bootstrap, f"{job}.output")[0]]

    if stateful:
        killed_runs(cmd, env, logs, faults_file, sender, random.Random(sum(map(ord, query))), faults=(None,))

    seen, since = (-1, -1), time.time()  # (rows read, output rows) and when they last changed

    def done() -> bool:
        nonlocal flushed, seen, since
        if stateful:
            sender()
        read = consumed()
        if not flushed and read == len(evs):
            write(kafka_bootstrap, job, flush)
            flushed = True
        if not (flushed and (sender.all_applied or not stateful)):
            return False
        got = outputs()
        if reference.diff(query, expected, got) is None:
            return True
        if (read, len(got)) != seen:
            seen, since = (read, len(got)), time.time()
        # every row read, nothing new for QUIET_S and still wrong: the assertion below shows the diff
        return read == len(evs) + len(flush) and time.time() - since > QUIET_S

    t0 = time.time()
    final_run(cmd, env, logs / "final.log", done, timeout_s=420, linger_s=2.0)
    if stateful:
        check_plan_applied(db_url, job, f"plan-{query}", steps, first.partition("=")[0])
    got = outputs()
    problem = reference.diff(query, expected, got)
    assert problem is None, problem
    assert expected, "the reference has no rows: the test would prove nothing"
    print(f"{query}: {len(expected)} reference rows, {len(got)} output rows, final run {time.time() - t0:.0f}s")
