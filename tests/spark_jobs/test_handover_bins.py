"""spark_jobs.handover: who does what with a bin in a handover (rows, timer outputs, dead letters),
the routing's fan-out, and the fresh bin in the durable state — built by the new owner from empty at
the step, in its own objects, rebuilt from them (never from the old owner's state) when its cache is
lost, and the bin itself once the step completes. Worker epochs without Spark (tests/helpers/
worker_epochs.py); the routing's fan-out on Spark; the whole job in tests/system/test_handover_job.py."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs import bins as B
from spark_jobs.durable import read_state
from spark_jobs.handover import BinHandover, fan_out, from_decision, overrides, roles, without_fresh_rejects
from spark_jobs.operators import decode_count
from spark_jobs.records import REJECT_COLUMN
from tests.helpers.worker_epochs import Harness, keys_of

pytestmark = pytest.mark.dataplane
H = BinHandover(bin=3, src=0, dst=1, since=4, activation_ms=10_000, boundary_ms=15_000)


def test_each_owner_keeps_its_windows_outputs_and_the_step_knows_its_roles():
    assert H.role(0) == "old" and H.role(1) == "new" and H.role(2) is None
    assert H.keeps_output("old", 15_000) and not H.keeps_output("old", 15_001)
    assert H.keeps_output("new", 20_000) and not H.keeps_output("new", 15_000)
    done = BinHandover(3, 0, 1, 4, 10_000, 15_000, completes=True)
    assert done.role(0) is None and done.role(1) is None, "at the completion the map says who owns the bin"
    assert roles([H, done], 1) == {3: ("new", H)}
    assert overrides([H], 1) == {3: (4, 1)} and overrides([H], 0) == {}
    assert from_decision({"bins": [H.to_list(), done.to_list()]}) == (H, done) and from_decision(None) == ()


def test_the_routing_fans_an_open_handovers_bins_out_to_both_owners():
    assert fan_out([], 8) is None and fan_out([BinHandover(3, 0, 1, 4, 0, 0, completes=True)], 8) is None
    sql = fan_out([H, BinHandover(1, 1, 0, 4, 0, 0)], 8)
    d = "element_at(CAST(split('-1,0,-1,1,-1,-1,-1,-1', ',') AS ARRAY<INT>), bin + 1)"
    assert sql == f"posexplode(IF({d} < 0, array(worker), array(worker, {d})))"


def test_the_fan_out_runs_in_spark_and_duplicates_only_the_handed_over_bins(spark):
    df = spark.createDataFrame([(b, b % 2) for b in range(6)], "bin int, worker int")
    got = sorted(tuple(r) for r in df.selectExpr("bin", f"{fan_out([H], 8)} AS (copy, worker)").collect())
    assert got == [(0, 0, 0), (1, 0, 1), (2, 0, 0), (3, 0, 1), (3, 1, 1), (4, 0, 0), (5, 0, 1)], "copy 1: new owner"


def test_a_new_owner_drops_its_fresh_bins_rejected_rows_the_old_owner_dead_letters_them():
    t = pa.table({"key": pa.array([b"a", None, b"c", b"d"], pa.binary()), "bin": pa.array([3, 3, 3, 5], pa.int32()),
                  REJECT_COLUMN: pa.array([None, None, "parse", "parse"])})
    kept = without_fresh_rejects(t, {3})
    assert kept.column("key").to_pylist() == [b"a", b"d"], "bin 5 is not fresh here: its reject stays a dead letter"
    assert without_fresh_rejects(t, set()) is t


class _Fanned(Harness):
    """The harness with a handover open: the handed-over bins' rows also reach the new owner."""

    fan: dict[int, int] = {}

    def table(self, keys, worker, values=None):  # type: ignore[no-untyped-def]
        if not self.fan:
            return super().table(keys, worker, values)
        mine = [k for k in keys if worker in (self.assignment[b := B.bin_of_hash(self.h(k), self.k)], self.fan.get(b))]
        saved, self.assignment = self.assignment, [worker] * len(self.assignment)  # the base keeps a worker's rows
        try:
            return super().table(mine, worker, values)
        finally:
            self.assignment = saved


def _bin_counts(uri: str, b: int) -> Counter[bytes]:
    out: Counter[bytes] = Counter()
    for sk, v in read_state(uri).get(b, {}).items():
        key, st = B.decode_entry(sk, v)
        out[key] = decode_count(st)
    return out


@pytest.mark.parametrize("snapshot", [False, True], ids=["no-snapshot", "snapshot-due-then"])
def test_the_fresh_bin_lives_in_the_new_owners_objects_and_becomes_the_bin(tmp_path, snapshot):
    """The completion takes no snapshot (its manifest's `handed_over` says where the bin restarts,
    spark_jobs.history); a snapshot that happens to be due then changes nothing."""
    hz = _Fanned(tmp_path, workers=2, snapshot_every=100)
    for e in range(3):
        hz.run_epoch(keys_of(300, e))
    b = next(b for b in range(8) if hz.assignment[b] == 0)
    in_b = [k for k in {k for e in range(12) for k in keys_of(300, e)} if B.bin_of_hash(hz.h(k), hz.k) == b]
    assert in_b, "the bin has keys"
    old_before = _bin_counts(hz.uri, b)
    since = hz.epoch
    hz.fan = {b: 1}
    fresh: Counter[bytes] = Counter()
    for e in range(3, 6):
        ho = (BinHandover(b, 0, 1, since, 0, 1 << 62),)
        keys = keys_of(300, e)
        cfg = dataclasses.replace(hz.cfg(), handover=ho)
        if e == 4:
            hz.executor_of[1] = "exec-new"  # worker 1's cache is lost mid-overlap: the fresh bin is rebuilt
        for w in range(2):
            hz.task(cfg, w, keys, hz.executor_of[w])
        hz.ds.commit_epoch(hz.epoch, hz.version, 2, False)
        hz.ref.update(keys)
        fresh.update(k for k in keys if B.bin_of_hash(hz.h(k), hz.k) == b)
        hz.epoch += 1
        # the map still names the old owner: the bin is the old owner's, whole; the fresh bin is not read
        assert _bin_counts(hz.uri, b) == Counter({k: hz.ref[k] for k in in_b if hz.ref[k]})
    assert old_before and fresh
    # the completion: the map moves the bin, the new owner's fresh bin becomes it (on a cache it lost too)
    hz.executor_of[1] = "exec-newer"
    hz.assignment[b] = 1
    hz.version += 1
    hz.ds.record_map(hz.version, hz.assignment)
    hz.fan = {}
    done = (BinHandover(b, 0, 1, since, 0, 1 << 62, completes=True),)
    cfg = dataclasses.replace(hz.cfg(moving_in={1: (b,)}, snapshot=snapshot), handover=done)
    for w in range(2):
        hz.task(cfg, w, [], hz.executor_of[w])
    docs = hz.ds.commit_epoch(hz.epoch, hz.version, 2, snapshot, {b: (since, 1)})
    got = docs[1]["moved_in"][str(b)]
    assert (got["mode"], got["keys"], got["bytes"]) == ("handover", 0, 0), "nothing of the old owner's state moved"
    assert got["rebuilt"]["mode"] == "load" and got["rebuilt"]["keys"] > 0, "a lost cache: rebuilt from its own objects"
    assert _bin_counts(hz.uri, b) == Counter({k: fresh[k] for k in fresh}), "the bin is what the new owner built"
    # after it: the new owner loses its cache again and rebuilds the bin from the durable state, which
    # (no snapshot since) must skip the old owner's objects before the step and during the overlap
    hz.epoch += 1
    hz.executor_of[1] = "exec-newest"
    keys = keys_of(300, 6)
    hz.run_epoch(keys)
    fresh.update(k for k in keys if B.bin_of_hash(hz.h(k), hz.k) == b)
    assert _bin_counts(hz.uri, b) == Counter({k: fresh[k] for k in fresh}), "rebuilt after the completion"
    assert hz.ds.entries[-2].handed_over == {b: (since, 1)} and bool(hz.ds.entries[-2].snapshot) == snapshot


def test_every_handovers_routing_compiles_to_the_same_code(spark):
    """The new owners are a literal Spark references, not inlines: a handover of other bins to other
    workers runs the code generated for the first one, so no handover's first epoch compiles a stage."""
    df = spark.range(0, 64).selectExpr("CAST(id AS INT) AS bin", "CAST(id % 2 AS INT) AS worker")
    debug = spark._jvm.org.apache.spark.sql.execution.debug.package

    def code(hs):  # type: ignore[no-untyped-def]
        q = df.selectExpr("bin", f"{fan_out(hs, 64)} AS (copy, worker)")
        text = debug.codegenString(q._jdf.queryExecution().executedPlan())
        return text[text.index("Generated code:"):]

    one = code([BinHandover(3, 1, 0, 4, 0, 0)])
    assert "split(" not in one and one == code([BinHandover(5, 1, 0, 4, 0, 0), BinHandover(40, 0, 1, 4, 0, 0)])
