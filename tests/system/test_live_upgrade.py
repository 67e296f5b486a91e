"""A live code upgrade on a real job (real Kafka, Spark, SQLite): version 2 of a processor, written
after the job started into a directory its Python workers do not have on their path, is shipped by
the upgrade step and takes over at an epoch boundary without a restart; every key's state is
carried over (a renamed state variable with a field added) the first time version 2 handles it, so
the counts go on where version 1 left them. A driver restarted on its old command line runs
version 2. Bad upgrades are rejected whole, with the reason in their checkpoint, and the job runs
on: a module that does not import, a class that says another version, one that changes the
query, one with no StateUpgrade from the version in force. Version 3's upgrade function raises
on the hottest keys: their records become dead letters (`upgrade-error`) and their state stays as
it was; a rollback to version 2 and then to version 1 brings every key back, and in the end every
key's count is its records minus its dead letters: nothing lost, nothing doubled."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ballast.code_version import CodeVersion, ShadowSpec
from ballast.protocol import ControlStep
from spark_jobs.output import parse_id, read_output, record_id, scan_topic
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import checkpoints, consumed_rows, produce, zipf_keys
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
OPERATOR = "upgrade_counter:Counter"
HOT = 60  # version 3's upgrade function raises on a key that had this many records or more

EXAMPLE_V2 = HERE.parents[1] / "examples" / "operators" / "counts_v2.py"
V3 = '''
from spark_jobs.processor import StatefulProcessor, StateUpgrade


def _to_3(v):
    if v[0] >= {hot}:
        raise ValueError(f"version 3 cannot take a count of {{v[0]}}")
    return v


class Counter(StatefulProcessor):  # the state of version 2; its upgrade function raises on big counts
    ballast_version = "3"
    ballast_upgrades = (StateUpgrade("2", "3", values={{"tally": _to_3}}), StateUpgrade("3", "2"))

    def init(self, handle):
        self.tally = handle.get_value_state("tally")

    def handle_input_rows(self, key, rows, timer_values):
        n, mine = self.tally.get() or (0, 0)
        k = sum(1 for _ in rows)
        self.tally.update((n + k, mine + k))
        yield {{"key": key[0], "count": n + k, "v": "3", "mine": mine + k}}
'''


def _step(job: str, plan: str, mv: int, ref: str, version: str, files: tuple[str, ...] = ()) -> bytes:
    now = datetime.now(UTC)
    return ControlStep(job=job, operator=OPERATOR, plan_id=plan, step=1, steps=1, kind="upgrade", moves=(),
                       workers=2, map_version=mv, issued_at=now, effective_at=now,
                       code=CodeVersion(ref, version, files)).to_json()


def test_a_processor_is_upgraded_live_bad_versions_are_refused_and_rollback_restores(
        spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    code_dir, suffix = _later_versions_dir(spark, tmp_path, unique_name)
    refs = {}
    for version in ("2", "3"):  # version 2 is the example docs/operators.md shows
        mod = f"counter_v{version}_{suffix}"
        (code_dir / f"{mod}.py").write_text(EXAMPLE_V2.read_text() if version == "2" else V3.format(hot=HOT))
        refs[version] = (f"{mod}:Counter", (str(code_dir / f"{mod}.py"),))
    cfg = RunConfig(job=job, operator=OPERATOR, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"),
                    bootstrap=kafka_bootstrap, db_url=db_url, bins=8, workers=2, trigger_ms=200)
    ckpt = cfg.checkpoint_dir + "/spark"
    keys = zipf_keys(6_000, 80, seed=3, s=1.1)
    parts = [keys[i * 1_200:(i + 1) * 1_200] for i in range(5)]
    sent: list[bytes] = []

    def feed(i: int, runner) -> None:  # type: ignore[no-untyped-def]
        produce(kafka_bootstrap, topic, parts[i], 2)
        sent.extend(parts[i])
        wait_until(lambda: consumed_rows(ckpt, topic) == len(sent), 180, f"part {i} consumed",
                   check=lambda: _alive(runner))

    def step(runner, plan: str, payload: bytes, status: str) -> str:  # type: ignore[no-untyped-def]
        send_control(kafka_bootstrap, job, [payload], operator=OPERATOR)
        wait_until(lambda: (plan, 1) in checkpoints(db_url, job), 120, f"the checkpoint of {plan}",
                   check=lambda: _alive(runner))
        cp = checkpoints(db_url, job)[(plan, 1)]
        assert cp.status == status, (plan, cp.status, cp.reason)
        return cp.reason or ""

    runner = start_job(spark, cfg)
    try:
        feed(0, runner)
        assert "does not import" in step(runner, "nope", _step(job, "nope", 0, "no_such_module_x:Counter", "9"),
                                         "rejected")
        ref2, files2 = refs["2"]
        assert "says ballast_version '2'" in step(runner, "label", _step(job, "label", 0, ref2, "7", files2),
                                                  "rejected")
        assert "StateUpgrade('1', '3')" in step(runner, "skip", _step(job, "skip", 0, *_ref(refs, "3")),
                                                "rejected")
        step(runner, "up2", _step(job, "up2", 0, ref2, "2", files2), "applied")
        feed(1, runner)
    finally:
        runner.stop()
    runner = start_job(spark, cfg)  # a new driver on the command line of version 1
    try:
        assert [v for v, _ in runner.live_code.history(runner._state)] == ["1", "2"]
        feed(2, runner)
        step(runner, "up3", _step(job, "up3", 1, *_ref(refs, "3")), "applied")
        feed(3, runner)
        step(runner, "back2", _step(job, "back2", 2, ref2, "2", files2), "applied")
        step(runner, "back1", _step(job, "back1", 3, OPERATOR, "1"), "applied")
        feed(4, runner)
    finally:
        runner.stop()

    outs, _ = read_output(kafka_bootstrap, f"{job}.output")
    rows = [(o.epoch, json.loads(o.value)) for o in outs]
    applied = {p: checkpoints(db_url, job)[(p, 1)].applied_epoch for p in ("up2", "up3", "back2", "back1")}

    def version_at(epoch: int) -> str:
        v = "1"
        for plan, at in sorted(applied.items(), key=lambda x: x[1]):
            if epoch >= at:
                v = {"up2": "2", "up3": "3", "back2": "2", "back1": "1"}[plan]
        return v

    wrong = [(e, r) for e, r in rows if r["v"] != version_at(e)]
    assert not wrong, f"{len(wrong)} outputs from a version not in force, e.g. {wrong[:3]}"
    assert {r["v"] for _, r in rows} == {"1", "2", "3"}
    dead = _dead_letters(kafka_bootstrap, f"{job}.dlq")
    assert dead and set(dead.values()) == {"upgrade-error"}, dead
    lost = Counter(json.loads(k)["key"] for k, _ in dead)  # a dead letter's key is the routed one (JSON)
    hot = {k.decode() for k, n in Counter(parts[0] + parts[1] + parts[2]).items() if n >= HOT}
    assert lost and set(lost) <= hot, "only keys whose carry-over raises lose records to the DLQ"
    # in version 3's epochs a poisoned key's records are dead letters and the rest go on under version 3
    v3 = {r["key"] for e, r in rows if r["v"] == "3"}
    assert v3 and not v3 & set(lost)
    last: dict[str, int] = {}
    for _, r in sorted(rows, key=lambda x: x[0]):
        last[r["key"]] = r["count"]
    want = {k.decode(): n - lost.get(k.decode(), 0) for k, n in Counter(sent).items()}
    assert last == want, "every key's count is its records minus its dead letters"


def _later_versions_dir(spark, tmp_path: Path, name: str) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """Version 1 where the job and its executors import it; a directory for the later versions, which
    nothing has on its path until an upgrade step ships them; and a suffix that gives each version a
    module of its own in this test session (a Python worker keeps a module it imported once)."""
    spark.sparkContext.addPyFile(str(HERE / "upgrade_counter.py"))
    sys.path.insert(0, str(HERE))
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    return code_dir, name.replace("-", "_").replace(".", "_")


def _ref(refs: dict, version: str) -> tuple[str, str, tuple[str, ...]]:
    ref, files = refs[version]
    return ref, version, files


def _alive(runner) -> None:  # type: ignore[no-untyped-def]
    if not runner.running and runner.query is not None and runner.query.exception() is not None:
        raise AssertionError(f"query failed: {runner.query.exception()}")


def _dead_letters(bootstrap: str, topic: str) -> dict[tuple[bytes, str], str]:
    """(key, source) -> reason of every dead letter (a replay's copy counted once)."""
    out: dict[tuple[bytes, str], str] = {}
    seen = set()
    for msg in scan_topic(bootstrap, topic, 60, consumer_timeout_ms=1000):
        rid = parse_id(record_id(msg))  # type: ignore[arg-type]
        if rid in seen:
            continue
        seen.add(rid)
        h = {k: v.decode() for k, v in msg.headers}
        out[(msg.key, h["ballast-source"])] = h["ballast-reason"]
    return out


WRONG = '''
from spark_jobs.processor import StatefulProcessor, StateUpgrade


class Counter(StatefulProcessor):  # a version 2 with a bug: every record counts twice
    ballast_version = "2"
    ballast_upgrades = (StateUpgrade("1", "2"),)

    def init(self, handle):
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key, rows, timer_values):
        n = (self.count.get() or (0,))[0] + 2 * sum(1 for _ in rows)
        self.count.update((n,))
        yield {"key": key[0], "count": n, "v": "2"}
'''


def test_a_shadow_upgrade_catches_a_wrong_version_and_cuts_over_to_a_right_one(
        spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    """Shadow, then cut over (Gloss): the new version runs beside the version in force on the same
    input, on a copy of the state, its outputs held back and compared. A version that counts twice is
    caught and rejected, the job never having sent one of its outputs; the right one is compared for
    its epochs and cut over, and the counts go on exactly."""
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    code_dir, suffix = _later_versions_dir(spark, tmp_path, unique_name)
    wrong, right = code_dir / f"counter_wrong_{suffix}.py", code_dir / f"counter_right_{suffix}.py"
    wrong.write_text(WRONG)
    right.write_text(EXAMPLE_V2.read_text())
    cfg = RunConfig(job=job, operator=OPERATOR, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"),
                    bootstrap=kafka_bootstrap, db_url=db_url, bins=8, workers=2, trigger_ms=200)
    ckpt = cfg.checkpoint_dir + "/spark"
    keys = zipf_keys(2_400, 40, seed=7, s=1.1)
    sent: list[bytes] = []
    shadow = ShadowSpec(epochs=2, fields=("key", "count"))

    def upgrade(plan: str, path: Path, mv: int) -> bytes:
        now = datetime.now(UTC)
        return ControlStep(job=job, operator=OPERATOR, plan_id=plan, step=1, steps=1, kind="upgrade", moves=(),
                           workers=2, map_version=mv, issued_at=now, effective_at=now,
                           code=CodeVersion(f"{path.stem}:Counter", "2", (str(path),), shadow)).to_json()

    def feed_until(plan: str, runner) -> None:  # type: ignore[no-untyped-def]
        """Input in small parts, one epoch each, until the step has its checkpoint."""
        while (plan, 1) not in checkpoints(db_url, job):
            part = keys[len(sent):len(sent) + 150]
            assert part, f"the input ran out before {plan} was decided"
            produce(kafka_bootstrap, topic, part, 2)
            sent.extend(part)
            wait_until(lambda: consumed_rows(ckpt, topic) == len(sent), 120, "a part consumed",
                       check=lambda: _alive(runner))

    runner = start_job(spark, cfg)
    try:
        produce(kafka_bootstrap, topic, keys[:300], 2)
        sent.extend(keys[:300])
        wait_until(lambda: consumed_rows(ckpt, topic) == len(sent), 120, "the first part", check=lambda: _alive(runner))
        send_control(kafka_bootstrap, job, [upgrade("wrong", wrong, 0)], operator=OPERATOR)
        feed_until("wrong", runner)
        cp = checkpoints(db_url, job)[("wrong", 1)]
        assert cp.status == "rejected" and "differ" in (cp.reason or "") and "e.g. key" in (cp.reason or ""), \
            cp.reason
        send_control(kafka_bootstrap, job, [upgrade("right", right, 0)], operator=OPERATOR)
        feed_until("right", runner)
        cp = checkpoints(db_url, job)[("right", 1)]
        assert cp.status == "applied" and "0 differ, 0 raised: cut over" in (cp.reason or ""), cp.reason
        rest = keys[len(sent):len(sent) + 300]
        produce(kafka_bootstrap, topic, rest, 2)
        sent.extend(rest)
        wait_until(lambda: consumed_rows(ckpt, topic) == len(sent), 120, "the last part", check=lambda: _alive(runner))
    finally:
        runner.stop()
    rows = [(o.epoch, json.loads(o.value)) for o in read_output(kafka_bootstrap, f"{job}.output")[0]]
    assert {r["v"] for e, r in rows if e < cp.applied_epoch} == {"1"}, "a shadow's outputs are never sent"
    assert {r["v"] for e, r in rows if e >= cp.applied_epoch} == {"2"}
    last = {r["key"]: r["count"] for _, r in sorted(rows, key=lambda x: x[0])}
    assert last == {k.decode(): n for k, n in Counter(sent).items()}, "exact counts through both shadows"
