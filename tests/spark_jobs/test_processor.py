"""Stateful-processor API without Spark: time modes, the guide's example, and one
worker's epoch (run_processor) against a real LMDB cache. State variables and TTL: test_key_state.py;
the timer index and the clock: test_timers.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from spark_jobs import timers
from spark_jobs.bins import bin_of_hash
from spark_jobs.cache import WorkerCache
from spark_jobs.objects import DEAD_LETTER, OUTPUT, ObjectWriter
from spark_jobs.processor import (
    QuerySpec,
    StatefulProcessor,
)
from tests.helpers.processor_key import handle_on_key

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "operators"))

K = 4  # 16 bins


def test_timers_need_a_time_mode_and_state_needs_a_key():
    h, _ = handle_on_key(0, mode="None")
    with pytest.raises(RuntimeError, match="time_mode"):
        h.register_timer(10)
    h._current = None
    with pytest.raises(RuntimeError, match="only available inside"):
        h.get_value_state("v", "x long").get()
    with pytest.raises(ValueError, match="event_time_column"):
        QuerySpec(time_mode="EventTime")
    with pytest.raises(ValueError, match="time_mode must be"):
        QuerySpec(time_mode="Sometimes")


def test_the_guide_shows_the_tested_example():
    """docs/operators.md's code blocks are verbatim parts of an example the Spark tests run (the
    examples, or a NEXMark query tests/system/test_nexmark_queries.py runs)."""
    import re

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "operators.md").read_text()
    examples = {p.name: p.read_text() for d in ("examples/operators", "spark_jobs/nexmark")
                for p in (root / d).glob("*.py")}
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        assert any(block in text for text in examples.values()), (
            f"docs/operators.md shows code that is in none of {sorted(examples)}:\n{block}")


# ------------------------------------------------------------------ one worker's epoch --------
def _table(rows: list[tuple[bytes, dict]], worker: int = 0, k: int = K):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    hs = [((abs(hash(k)) * 2654435761) & ((1 << 63) - 1)) for k, _ in rows]
    return pa.table({"key": [k for k, _ in rows], "value": [json.dumps(v).encode() for _, v in rows],
                     "partition": [0] * len(rows), "offset": list(range(len(rows))), "h": hs,
                     "bin": [bin_of_hash(h, k) for h in hs], "worker": [worker] * len(rows)})


def _epoch(cache, epoch: int, rows, clock, spec_cls, k: int = K,  # type: ignore[no-untyped-def]
           split: bool = False, merged_from: int | None = None, roles=None) -> tuple[list, dict]:
    from spark_jobs.processing import ProcessorOperator, run_processor

    op = ProcessorOperator(spec_cls)
    cfg = SimpleNamespace(bins_bits=k, clock=clock, op_conf={"ts_columns": ["ts"]}, input_topic="in", split=split,
                          merged_from=merged_from)
    writer = ObjectWriter(meta={"epoch": epoch})
    table = _table(rows, k=k) if rows else None

    def run(txn):  # type: ignore[no-untyped-def]
        cache.ensure_bits(txn, k, K)
        return run_processor(cfg, cache, txn, table, len(rows), set(range(1 << k)), writer, op, roles=roles)

    _, _, extra = cache.write(run)
    return writer.outputs, extra


def test_run_processor_fires_event_time_timers_once(tmp_path):
    import window_counts as wc

    u = lambda name: json.dumps({"user": name}).encode()  # noqa: E731
    ev = lambda name, ms, amt: (u(name), {"user": name, "ts": ms, "amount": amt})  # noqa: E731
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        outs, extra = _epoch(cache, 0, [ev("a", 1_000, 1), ev("a", 2_000, 2), ev("b", 12_000, 5)],
                             timers.EpochClock(0, 0, 0), wc.WindowCounts)
        assert outs == [] and extra["max_event_ms"] == 12_000 and extra["next_timer_ms"] == 10_000
        # watermark 7 s: a row at 6 s is late, a dead letter with its reason; nothing is due yet
        outs, extra = _epoch(cache, 1, [ev("a", 6_000, 100), ev("a", 9_000, 3)], timers.EpochClock(1, 0, 7_000),
                             wc.WindowCounts)
        assert [(kind, json.loads(note)["reason"], json.loads(note)["offset"]) for kind, _, _, note in outs] == [
            (DEAD_LETTER, "late", 0)] and extra["late_rows"] == 1
        # no input, watermark 10 s: a's window [0, 10 s) fires, b's [10 s, 20 s) waits
        outs, extra = _epoch(cache, 2, [], timers.EpochClock(2, 0, 10_000), wc.WindowCounts)
        assert [(k, json.loads(v)) for kind, k, v, _ in outs if kind == OUTPUT] == [
            (u("a"), {"user": "a", "window_start": 0, "count": 3, "total": 6})]
        assert extra["timers_fired"] == 1 and extra["next_timer_ms"] == 20_000
        outs, extra = _epoch(cache, 3, [], timers.EpochClock(3, 0, 15_000), wc.WindowCounts)
        assert outs == [] and extra["timers_fired"] == 0, "a fired timer never fires again"
        outs, extra = _epoch(cache, 4, [], timers.EpochClock(4, 0, 20_000), wc.WindowCounts)
        assert [json.loads(v)["user"] for _, _, v, _ in outs] == ["b"] and extra["next_timer_ms"] is None

        def left(txn):
            return sum(1 for _ in txn.cursor(db=cache.data))
        assert cache.write(left) == 0, "no state, no index entry left once every window was emitted"


class Expiring(StatefulProcessor):
    """Remembers each key's last value for 1 s of processing time; a 'boom' value raises."""

    ballast_query = QuerySpec(time_mode="ProcessingTime")

    def init(self, handle):  # type: ignore[no-untyped-def]
        self.last = handle.get_value_state("last", "v string", ttl_duration_ms=1000)

    def handle_input_rows(self, key, rows, timer_values):  # type: ignore[no-untyped-def]
        for r in rows:
            if r.value == "boom":
                raise ValueError("poisoned")
            yield {"key": key[0], "before": (self.last.get() or (None,))[0], "now": r.value}
            self.last.update((r.value,))


def test_ttl_cleanup_without_input_and_dead_letters(tmp_path):
    row = lambda k, v: (json.dumps({"key": k}).encode(), {"key": k, "value": v})  # noqa: E731
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        outs, extra = _epoch(cache, 0, [row("a", "x"), row("b", "boom")], timers.EpochClock(0, 10_000, 0), Expiring)
        assert [json.loads(v) for kind, _, v, _ in outs if kind == OUTPUT] == [{"key": "a", "before": None, "now": "x"}]
        dead = [json.loads(note) for kind, _, _, note in outs if kind == DEAD_LETTER]
        assert len(dead) == 1 and "poisoned" in dead[0]["error"] and dead[0]["offset"] == 1
        assert extra["next_expiry_ms"] == 11_000
        outs, _ = _epoch(cache, 1, [row("a", "y")], timers.EpochClock(1, 10_500, 0), Expiring)
        assert json.loads(outs[0][2])["before"] == "x"
        _, extra = _epoch(cache, 2, [], timers.EpochClock(2, 11_600, 0), Expiring)  # expired: cleaned, no input
        assert extra["next_expiry_ms"] is None
        assert cache.write(lambda txn: sum(1 for _ in txn.cursor(db=cache.data))) == 0


def test_watermark_follows_the_rows_that_pass_where(spark, tmp_path):
    """docs/operators.md (Clock): rows a query's `where` drops do not move its watermark. NEXMark Q8
    reads persons and auctions only: a bid far ahead in event time never reaches its workers, so the
    epoch's event-time maximum (the next watermark's base) is the auctions' and persons'."""
    from spark_jobs.nexmark import AUCTION, BID, PERSON
    from spark_jobs.nexmark.q8 import Q8
    from spark_jobs.processing import ProcessorOperator

    def rec(kind: int, doc: dict, offset: int) -> tuple:
        return (b"k", json.dumps(doc).encode(), 0, offset, kind)

    df = spark.createDataFrame(
        [rec(PERSON, {"id": 7, "name": "p", "date_time": 1_000}, 0),
         rec(AUCTION, {"id": 70, "seller": 7, "reserve": 5, "date_time": 2_000}, 1),
         rec(BID, {"auction": 70, "bidder": 7, "price": 9, "date_time": 90_000}, 2)],
        "key binary, value binary, partition int, offset long, __source int")
    keyed = ProcessorOperator(Q8).keyed(df).collect()
    rows = [(r["key"], json.loads(r["value"])) for r in keyed]
    assert sorted(d["date_time"] for _, d in rows) == [1_000, 2_000], "the bid passed Q8's where"
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        _, extra = _epoch(cache, 0, rows, timers.EpochClock(0, 0, 0), Q8)
    assert extra["max_event_ms"] == 2_000


@pytest.mark.parametrize("change, before, after", [("split", K, K + 2), ("merge", K + 2, K)])
def test_timers_refiled_at_a_split_or_merge_each_fire_once(tmp_path, change, before, after):
    """Windows over 60 users, then a split (16 -> 64 bins: the timers of each bin's other parts leave
    the first part's range) or a merge (64 -> 16: the parts' timers go under the merged bin's start)
    at an epoch: the changelog records it, and every window fires exactly as it does in a job that
    never changed its bins (without the re-filing, the merged bins' scans would miss three parts in four)."""
    import window_counts as wc

    users = [f"user-{i}" for i in range(60)]
    ev = lambda name, ms: (json.dumps({"user": name}).encode(), {"user": name, "ts": ms, "amount": 1})  # noqa: E731
    first = [ev(u, 1_000 + i) for i, u in enumerate(users)]
    fired: dict[str, list] = {}
    for name, at in (("plain", None), (change, 1)):
        with WorkerCache(tmp_path / name, "s", "job", 0) as cache:
            outs = _epoch(cache, 0, first, timers.EpochClock(0, 0, 0), wc.WindowCounts, k=before)[0]
            for e in (1, 2):
                bits = after if at is not None and e >= at else before
                outs += _epoch(cache, e, [], timers.EpochClock(e, 0, 5_000 * e), wc.WindowCounts, k=bits,
                               split=change == "split" and e == at,
                               merged_from=before if change == "merge" and e == at else None)[0]

            def entries(txn):  # type: ignore[no-untyped-def]
                return [ik for ik, _ in txn.cursor(db=cache.data) if timers.is_index_key(ik)]
            assert cache.write(entries) == [], "every window fired: no timer left"
            fired[name] = sorted((k_, json.loads(v)["count"]) for kind, k_, v, _ in outs if kind == OUTPUT)
    assert fired[change] == fired["plain"] and len(fired["plain"]) == len(users)


def test_event_time_far_ahead_is_a_dead_letter_that_leaves_the_watermark(tmp_path):
    import dataclasses

    import window_counts as wc

    bounded = type("Bounded", (wc.WindowCounts,), {
        "ballast_query": dataclasses.replace(wc.WindowCounts.ballast_query, max_ahead_ms=60_000)})
    ev = lambda name, ms: (json.dumps({"user": name}).encode(), {"user": name, "ts": ms, "amount": 1})  # noqa: E731
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        outs, extra = _epoch(cache, 0, [ev("a", 1_000), ev("b", 253402300799000), ev("c", 150_000)],
                             timers.EpochClock(0, 100_000, 0), bounded)
    dead = [json.loads(note) for kind, _, _, note in outs if kind == DEAD_LETTER]
    assert [(d["reason"], d["offset"]) for d in dead] == [("event-time-ahead", 1)]
    assert extra["max_event_ms"] == 150_000, "the year-9999 row does not move the watermark"
    with pytest.raises(ValueError, match="max_ahead_ms"):
        QuerySpec(max_ahead_ms=-1)


def test_in_a_handover_each_owner_emits_its_own_windows_and_only_the_old_one_dead_letters(tmp_path):
    """Tumbling 10 s windows handed over at 10 s (migration 0, activation = boundary = 10 s), every
    bin of worker 0 to worker 1; both get every row. The old owner folds them all and keeps the
    outputs of the windows that end by the boundary, the new owner folds rows from activation on and
    keeps the later windows' outputs; a late row is one dead letter, the old owner's."""
    import window_counts as wc

    from spark_jobs.handover import BinHandover

    def roles(role: str):  # type: ignore[no-untyped-def]
        return {b: (role, BinHandover(b, 0, 1, 0, 10_000, 10_000)) for b in range(1 << K)}

    u = lambda name: json.dumps({"user": name}).encode()  # noqa: E731
    ev = lambda name, ms, amt: (u(name), {"user": name, "ts": ms, "amount": amt})  # noqa: E731
    epochs = [([ev("a", 1_000, 1), ev("a", 12_000, 2), ev("b", 9_000, 4)], 0),
              ([ev("a", 13_000, 8), ev("b", 8_000, 16)], 10_000),
              ([ev("a", 11_000, 32)], 15_000),  # late for both: one dead letter
              ([], 20_000)]
    got: dict[str, list] = {}
    for role, worker in (("old", 0), ("new", 1)):
        outs = []
        with WorkerCache(tmp_path, "s", "job", worker) as cache:
            for e, (rows, wm) in enumerate(epochs):
                outs += _epoch(cache, e, rows, timers.EpochClock(e, 0, wm), wc.WindowCounts, roles=roles(role))[0]
        got[role] = outs
    emitted = {role: sorted((json.loads(v)["user"], json.loads(v)["window_start"], json.loads(v)["count"],
                             json.loads(v)["total"]) for kind, _, v, _ in outs if kind == OUTPUT)
               for role, outs in got.items()}
    assert emitted["old"] == [("a", 0, 1, 1), ("b", 0, 1, 4)], "b's row at 8 s came at watermark 10 s: late"
    assert emitted["new"] == [("a", 10_000, 2, 10)]
    assert [json.loads(n)["reason"] for kind, _, _, n in got["old"] if kind == DEAD_LETTER] == ["late", "late"]
    assert [kind for kind, *_ in got["new"] if kind == DEAD_LETTER] == []


def test_a_staggered_key_hands_over_on_its_own_grid_and_the_new_owner_folds_none_of_the_old_windows(tmp_path):
    """Tumbling 10 s windows staggered per key (the framework's phase, WindowSpec.phase_of), handed
    over with the first event at 10 s (the bin's grid-free boundary 19.999 s). Each key hands over at
    its own grid's boundary: the old owner keeps the key's windows that end by it, the new owner the
    later ones, together a run without a migration — and neither opens a window it drops (no timer
    fires without an output): the new owner folds from the key's activation, the old owner up to its
    boundary, where the bin's grid-free rule would have both fold a whole window of every key."""
    import window_counts as wc

    from ballast.policy.handover import Handover, WindowSpec
    from spark_jobs.handover import BinHandover
    from spark_jobs.processor import query

    spec = WindowSpec(10_000, staggered=True)

    class Staggered(wc.WindowCountsProcessor):
        def handleInputRows(self, key, rows, timerValues):  # type: ignore[no-untyped-def]
            phase = spec.phase_of(key)
            for row in rows:
                ms = int(row.ts.timestamp() * 1000)
                start = ms - (ms - phase) % 10_000
                count, total = self.windows.getValue((start,)) or (0, 0)
                if count == 0:
                    self.handle.registerTimer(start + 10_000)
                self.windows.updateValue((start,), (count + 1, total + row.amount))
            return iter([])

    Q = query(Staggered, input_schema=wc.INPUT_SCHEMA, grouping_keys=("user",), time_mode="EventTime",
              event_time_column="ts", lateness_ms=5_000, window=spec)
    bin_h = Handover.at(spec, 10_000)
    assert (bin_h.activation_ms, bin_h.boundary_ms) == (10_000, 19_999)
    users = [u for u in (f"u{i}" for i in range(40)) if 1_000 < spec.phase_of((u,)) < 9_000][:3]
    assert len(users) == 3, "keys with a phase inside the window"
    u = lambda name: json.dumps({"user": name}).encode()  # noqa: E731
    ev = lambda name, ms, amt: (u(name), {"user": name, "ts": ms, "amount": amt})  # noqa: E731
    epochs = [([ev(n, t, 1 + t // 1000) for n in users for t in (10_500, 12_000)], 0),
              ([ev(n, t, 1 + t // 1000) for n in users for t in (14_000, 17_500, 21_000)], 5_000),
              ([ev(n, t, 1 + t // 1000) for n in users for t in (24_000, 29_000)], 15_000),
              ([], 60_000)]

    def run(worker: int, role: str | None) -> tuple[list, int]:
        roles = None if role is None else {b: (role, BinHandover(b, 0, 1, 0, 10_000, 19_999)) for b in range(1 << K)}
        outs, fired = [], 0
        with WorkerCache(tmp_path, "s", "job", worker) as cache:
            for e, (rows, wm) in enumerate(epochs):
                o, extra = _epoch(cache, e, rows, timers.EpochClock(e, 0, wm), Q, roles=roles)
                outs += [tuple(json.loads(v).values()) for kind, _, v, _ in o if kind == OUTPUT]
                fired += extra["timers_fired"]
        return outs, fired

    want, _ = run(2, None)
    old, old_fired = run(0, "old")
    new, new_fired = run(1, "new")
    assert sorted(old + new) == sorted(want) and len(want) > 6
    for n in users:
        mine = bin_h.for_key(spec.phase_of((n,)))
        assert mine.boundary_ms < bin_h.boundary_ms
        assert all(w + 10_000 <= mine.boundary_ms for user, w, *_ in old if user == n)
        assert all(w + 10_000 > mine.boundary_ms for user, w, *_ in new if user == n)
    assert new_fired == len(new), "the new owner opened no window whose output it dropped"
    assert old_fired == len(old), "nor the old owner: it folds no row past the key's boundary"
