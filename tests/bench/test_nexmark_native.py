"""Spark's own NEXMark queries (bench/nexmark_native.py, the cost benchmark's baseline) answer what
Ballast's queries answer: bench.nexmark.reference, compared as multisets by the same `diff` as
tests/system/test_nexmark_queries.py, on the same generated events (ties at every window's top
price included, so a Q7 that kept one bid per window fails here).

Q1-Q3, Q5, Q7 and Q8 read the backlog in batches of 600 events, as the Ballast jobs do. Q4 and Q6
are continuous aggregations whose updates depend on the batches the winners fall into (the
reference module's docstring), and Spark does not record which batch a winner fell into; so they
read the whole backlog in one batch: the next (no-data) batch moves the watermark past every
auction's close, the second operator reads every winner in that batch and emits one update per
key, the final answer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.nexmark import reference
from bench.nexmark.writer import topics
from tests.helpers.dp_helpers import read_json_topic
from tests.helpers.nexmark import PARTITIONS, flush_events, nexmark_events, until_ms, write

pytestmark = [pytest.mark.bench, pytest.mark.nexmark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: (queries, events per batch) of each run of bench.nexmark_native
RUNS = (("q1,q2,q3,q5,q7,q8", 600), ("q4,q6", 1_000_000))


@pytest.mark.timeout(900)
def test_native_answers_equal_the_reference(kafka_bootstrap, make_topics, unique_name, tmp_path):
    prefix = unique_name
    queries = [q for qs, _ in RUNS for q in qs.split(",")]
    make_topics({t: PARTITIONS for t in topics(prefix).values()}
                | {f"{prefix}.native.{q}": PARTITIONS for q in queries})
    evs = nexmark_events()
    flush = flush_events(evs)
    write(kafka_bootstrap, prefix, evs + flush)
    for qs, max_offsets in RUNS:
        log = tmp_path / f"native-{qs.replace(',', '-')}.log"
        with open(log, "wb") as out:
            rc = subprocess.run([sys.executable, "-m", "bench.nexmark_native", "--prefix", prefix, "--bootstrap",
                                 kafka_bootstrap, "--queries", qs, "--checkpoint-root", str(tmp_path / "ckpt"),
                                 "--progress-dir", str(tmp_path / "progress"), "--max-offsets", str(max_offsets),
                                 "--timeout-s", "300"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                timeout=600).returncode
        assert rc == 0, log.read_text(errors="replace")[-3000:]
    problems = []
    for q in queries:
        error = tmp_path / "progress" / f"{q}.error"
        assert not error.exists(), f"native {q} failed:\n{error.read_text()}"
        until = {} if q in ("q1", "q2", "q3") else {"until_ms": until_ms(flush)}
        expected = reference.QUERIES[q](evs + flush, **until)
        if q in reference.UPDATE_KEY:  # every winner read in one batch: one update per key, its answer
            expected = reference.last_per_key(q, expected)
        got = read_json_topic(kafka_bootstrap, f"{prefix}.native.{q}")
        problems += [p] if (p := reference.diff(q, expected, got)) is not None else []
        print(f"native {q}: {len(expected)} reference rows, {len(got)} output rows")
    assert not problems, "\n".join(problems)
    q7 = reference.q7(evs + flush, until_ms=until_ms(flush))
    assert len(q7) > len({r["window_start"] for r in q7}), "no window has a tie: Q7's ties went untested"
