"""A live code upgrade of a chain's second operator (spark_jobs.chain; docs/operators.md, "Upgrading a
processor live"): `tag` re-keys every record by its category and `counter` (tests/system/
upgrade_counter.py, version 1) counts per category from the hand-off topic. Version 2 (the example
docs/operators.md shows) is shipped by an upgrade step addressed to `counter` alone while input
flows: it takes over at an epoch boundary and carries every category's count over, so the counts go
on where version 1 left them; the first operator runs on with no step and no restart, and its
outputs reach the second operator exactly once."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ballast.code_version import CodeVersion
from ballast.protocol import ControlStep
from ballast.topics import create_missing_topics, handoff_topic
from spark_jobs.chain import OperatorSpec, start_chain
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import checkpoints, produce
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
EXAMPLE_V2 = HERE.parents[1] / "examples" / "operators" / "counts_v2.py"


def test_a_chains_second_operator_is_upgraded_live_while_the_first_runs(spark, kafka_bootstrap, unique_name,
                                                                        tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    create_missing_topics(kafka_bootstrap, {topic: 2})
    n = 3000
    users = [b"u%03d" % (i * 7 % 50) for i in range(n)]
    cats = [b"cat-%02d" % (i * 13 % 40) for i in range(n)]
    for f in ("chain_ops.py", "upgrade_counter.py"):
        spark.sparkContext.addPyFile(str(HERE / f))
    sys.path.insert(0, str(HERE))
    code_dir = tmp_path / "code"  # version 2: on no path until the upgrade step ships it
    code_dir.mkdir()
    mod = f"chain_counter_v2_{unique_name.replace('-', '_').replace('.', '_')}"
    (code_dir / f"{mod}.py").write_text(EXAMPLE_V2.read_text())
    base = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                     db_url=db_url, bins=8, workers=2, trigger_ms=300, max_offsets_per_trigger=400)
    chain = start_chain(spark, base, [OperatorSpec.parse("tag=chain_ops:Tag"),
                                      OperatorSpec.parse("counter=upgrade_counter:Counter")])
    now = datetime.now(UTC)
    step = ControlStep(job=job, operator="counter", plan_id="up2", step=1, steps=1, kind="upgrade", moves=(),
                       workers=2, map_version=0, issued_at=now, effective_at=now,
                       code=CodeVersion(f"{mod}:Counter", "2", (str(code_dir / f"{mod}.py"),)))
    try:
        produce(kafka_bootstrap, topic, users[: n // 2], 2, cats[: n // 2])
        wait_until(lambda: (chain.runner("counter").epochs_done or 0) > 2, 180, "the second operator runs")
        send_control(kafka_bootstrap, job, [step.to_json()], operator="counter")
        produce(kafka_bootstrap, topic, users[n // 2:], 2, cats[n // 2:])  # while the upgrade is applied
        wait_until(lambda: ("up2", 1) in checkpoints(db_url, job, "counter"), 120, "the upgrade's checkpoint")
        wait_until(lambda: _last_counts(kafka_bootstrap, job) == {k.decode(): v for k, v in Counter(cats).items()},
                   240, "every category counted exactly once")
        assert all(r.query.exception() is None for r in chain.runners)
    finally:
        chain.stop()
    cp = checkpoints(db_url, job, "counter")[("up2", 1)]
    assert cp.status == "applied", cp.reason
    assert checkpoints(db_url, job, "tag") == {}, "the first operator got no step"
    rows = _rows(kafka_bootstrap, job)
    wrong = [(e, r) for e, r in rows if r["v"] != ("2" if e >= cp.applied_epoch else "1")]
    assert not wrong, f"{len(wrong)} outputs from a version not in force, e.g. {wrong[:3]}"
    assert {r["v"] for _, r in rows} == {"1", "2"}
    # version 2 counts what it saw itself beside the carried-over total: the total went on, not restarted
    first_v2 = {}
    for _, r in sorted(rows, key=lambda x: x[0]):
        if r["v"] == "2":
            first_v2.setdefault(r["key"], r)
    assert any(r["count"] > r["mine"] for r in first_v2.values()), "version 1's counts were carried over"
    handed, dups = read_output(kafka_bootstrap, handoff_topic(job, "tag"))
    assert len(handed) == n, f"the first operator's outputs: {len(handed)} unique of {n} ({dups} copies)"


def _rows(bootstrap: str, job: str) -> list[tuple[int, dict]]:
    """(epoch, output) of the second operator, each record once."""
    outs, _ = read_output(bootstrap, f"{job}.output")
    return [(o.epoch, json.loads(o.value)) for o in outs]


def _last_counts(bootstrap: str, job: str) -> dict[str, int]:
    last: dict[str, int] = {}
    for _, r in sorted(_rows(bootstrap, job), key=lambda x: x[0]):
        last[r["key"]] = r["count"]
    return last
