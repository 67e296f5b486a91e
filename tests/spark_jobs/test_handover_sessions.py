"""spark_jobs.handover_sessions: a handover of session windows in the data plane. The per-key tracker
(crossings, a candidate invalidated or replaced by an out-of-order row, confirmation, quiet keys),
the output rule, the completion index in a worker's cache (open keys reported, resolved as the
watermark passes their need time, purged when the handover ends) — and randomized runs against a
run without a migration: the union of both owners' kept outputs is the reference's sessions as a
multiset, once with the tracker alone (many streams) and once through run_processor on LMDB caches
with tests/system/session_counts.py (fewer). Milliseconds, no Spark; the live job is
tests/system/test_handover_sessions_job.py."""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs import timers
from spark_jobs.bins import bin_of_hash
from spark_jobs.cache import WorkerCache
from spark_jobs.handover import BinHandover, Role, roles
from spark_jobs.handover_sessions import Tracker, keeps
from spark_jobs.objects import OUTPUT, ObjectWriter

pytestmark = pytest.mark.dataplane
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "system"))
F, GAP = 100, 10  # first event 100, gap 10: activation = boundary = 110


def _fold(tr: Tracker, times: list[int], wm: int) -> Tracker:
    tr.fold(times, F, GAP, wm)
    return tr


def test_a_crossing_is_the_first_session_start_from_activation_on():
    tr = _fold(Tracker(), [100, 105], 0)
    assert (tr.crossing, tr.last, tr.need(GAP)) == (None, 105, 115), "a session from before activation: quiet at 115"
    _fold(tr, [114], 0)
    assert tr.crossing is None and tr.need(GAP) == 124, "114 is under a gap from 105: the same session"
    _fold(tr, [124], 0)
    assert tr.crossing == 124 and tr.need(GAP) == 124, "a gap (10) after 114: a session starts at 124"
    assert _fold(Tracker(), [99, 95], 0).last is None, "rows before F are not the tracker's"
    assert _fold(Tracker(), [110], 0).crossing == 110, "no row since F before it: activation itself starts one"


def test_an_out_of_order_row_invalidates_a_candidate_or_replaces_it_with_an_earlier_one():
    tr = _fold(Tracker(), [100, 112], 0)
    assert tr.crossing == 112
    _fold(tr, [105], 0)  # under a gap from 100 and from 112: one session from 100, no crossing left
    assert tr.crossing is None and tr.chains == [(100, 112)]
    _fold(tr, [130], 0)
    assert tr.crossing == 130
    _fold(tr, [123], 0)  # joins 130's session, which now starts at 123 (a gap after 112): the earlier start
    assert tr.crossing == 123
    _fold(tr, [117], 0)  # bridges 112 and 123: the session of 100 runs on to 130
    assert tr.crossing is None and tr.chains == [(100, 130)] and tr.need(GAP) == 140


def test_a_crossing_is_final_once_the_watermark_reaches_it():
    tr = _fold(Tracker(), [100, 120], 0)
    assert tr.crossing == 120
    _fold(tr, [125, 131], 120)  # rows at or past the watermark (120) cannot be before the crossing
    assert tr.crossing == 120 and tr.chains == [(120, 131)], "the session of 100 closed (110 <= 120): dropped"
    _fold(tr, [], 150)
    assert tr.crossing == 120 and tr.chains == [], "every chain closed; the crossing stays"
    back = Tracker.from_bytes(tr.to_bytes())
    assert back == tr and Tracker.from_bytes(None) == Tracker()


def test_each_owner_keeps_the_timers_on_its_side_of_the_keys_crossing():
    assert keeps("old", None, 10**9) and not keeps("new", None, 10**9), "no crossing: every session is the old one's"
    assert keeps("old", 124, 124) and not keeps("new", 124, 124), "a session ending at 114 fires at 124: old"
    assert keeps("new", 124, 134) and not keeps("old", 124, 134)


# ------------------------------------------------------------------ randomized, no-migration reference ----
class _Sessions:
    """A session-window processor of one owner, as session_counts does it: per key the open sessions
    [start, last, count]; a timer at last + gap emits (key, start, count)."""

    def __init__(self) -> None:
        self.open: dict[str, list[list[int]]] = {}

    def rows(self, key: str, ts: list[int]) -> None:
        for t in ts:
            cur = [t, t, 1]
            keep = []
            for s in self.open.get(key, []):
                if s[0] - GAP < t < s[1] + GAP:
                    cur = [min(cur[0], s[0]), max(cur[1], s[1]), cur[2] + s[2]]
                else:
                    keep.append(s)
            self.open[key] = [*keep, cur]

    def fire(self, wm: int) -> list[tuple[int, str, tuple[str, int, int]]]:
        """(timer, key, output) of every session whose timer is due, in timer order."""
        due = []
        for key, ss in self.open.items():
            due += [(s[1] + GAP, key, (key, s[0], s[2])) for s in ss if s[1] + GAP <= wm]
            self.open[key] = [s for s in ss if s[1] + GAP > wm]
        return sorted(due)


def _stream(rng: random.Random, epochs: int, lateness: int) -> list[list[tuple[str, int]]]:
    """Rows (key, event time) per epoch: event time advancing with bursts and pauses per key,
    out of order by up to lateness + 3 (so some rows are late)."""
    clock, out = 90, []
    for _ in range(epochs):
        clock += rng.randint(0, 6)
        out.append([(rng.choice("abcd"), max(0, clock - rng.randint(0, lateness + 3)))
                    for _ in range(rng.randint(0, 5))])
    return out


def _run(stream: list[list[tuple[str, int]]], lateness: int, step: int | None,
         keep: Any = keeps) -> tuple[Counter, Counter]:
    """A job's outputs without a migration (step None) or with a handover of its bin at epoch `step`:
    (the union of the owners' kept outputs, whether both owners' crossings agreed per key and epoch).
    The data plane's order per epoch: rows at or past the watermark folded, the due timers fired,
    the new owner's keys whose need time the watermark reached resolved; the step applies at the
    first epoch after one that ran at a watermark >= F + gap with no key open."""
    old, new = _Sessions(), _Sessions()  # old: the owner until the step completes; new: after it
    trk: dict[Role, dict[str, Tracker]] = {"old": {}, "new": {}}
    out: Counter = Counter()
    agreed: Counter = Counter()
    first = event_max = None
    done, open_before, wm_before = False, None, 0
    for e, rows in enumerate([*stream, [], []]):  # then two epochs past every session (the flush)
        wm = 10**6 if e >= len(stream) else max(0, event_max - lateness) if event_max is not None else 0
        if step is not None and e == step and event_max is not None:
            first = event_max + 1
        if first is not None and not done and e > step and wm_before >= first + GAP and open_before == 0:
            done = True
        by_key: dict[str, list[int]] = {}
        for k, t in rows:
            if t >= wm:  # else late: dropped by every owner alike
                by_key.setdefault(k, []).append(t)
        if first is None or done:  # one owner: every row, every output
            owner = old if first is None else new
            for k, ts in by_key.items():
                owner.rows(k, ts)
            out.update(o for _, _, o in owner.fire(wm))
        else:
            for k, ts in by_key.items():
                old.rows(k, ts)
                new.rows(k, [t for t in ts if t >= first])
                for role in ("old", "new"):
                    if k in trk[role] or any(t >= first for t in ts):
                        trk[role].setdefault(k, Tracker()).fold(ts, first, GAP, wm)
            for role, owner in (("old", old), ("new", new)):
                for ts_, k, o in owner.fire(wm):
                    tr = trk[role].get(k)
                    out[o] += keep(role, tr.crossing if tr is not None else None, ts_)
            for k, tr in trk["new"].items():
                agreed[trk["old"][k].crossing == tr.crossing] += 1
                if (need := tr.need(GAP)) is not None and need <= wm:
                    tr.done = True
            open_before = sum(tr.need(GAP) is not None for tr in trk["new"].values())
        wm_before = wm
        event_max = max([-1 if event_max is None else event_max, *(t for _, t in rows)]) if rows else event_max
    assert first is None or done, "the handover never completed after the flush"
    return +out, agreed


def test_randomized_both_owners_outputs_are_a_run_without_a_migration():
    rng = random.Random(11)
    crossings = 0
    for _ in range(400):
        lateness = rng.randint(0, 8)
        stream = _stream(rng, 40, lateness)
        step = rng.randint(1, 30)
        want, _ = _run(stream, lateness, None)
        got, agreed = _run(stream, lateness, step)
        assert got == want, (step, lateness, stream)
        assert agreed[False] == 0, "both owners must compute the same crossing"
        crossings += agreed[True]
    assert crossings > 1000


def test_randomized_the_check_fails_without_the_per_key_rule():
    """The check can fail: a new owner that keeps every output repeats sessions, one that splits at
    the boundary (the grid windows' rule) repeats or loses some."""
    rng = random.Random(3)
    streams = [_stream(rng, 40, 4) for _ in range(40)]
    greedy = sum(_run(s, 4, 10, lambda r, c, t: True)[0] != _run(s, 4, None)[0] for s in streams)
    boundary = sum(_run(s, 4, 10, lambda r, c, t: t <= F + GAP if r == "old" else t > F + GAP)[0]
                   != _run(s, 4, None)[0] for s in streams)
    assert greedy > 30 and boundary > 5, (greedy, boundary)


# ------------------------------------------------------------------ in a worker's cache (run_processor) ----
K = 2  # 4 bins, all handed over from worker 0 to worker 1


def _table(rows: list[tuple[str, int]]) -> Any:
    import pyarrow as pa

    keys = [json.dumps({"user": u}).encode() for u, _ in rows]
    hs_ = [(int.from_bytes(k.ljust(8, b"\0")[:8], "big") * 2654435761) & ((1 << 63) - 1) for k in keys]
    return pa.table({"key": keys, "value": [json.dumps({"user": u, "ts": t, "amount": 1}).encode() for u, t in rows],
                     "partition": [0] * len(rows), "offset": list(range(len(rows))), "h": hs_,
                     "bin": [bin_of_hash(h, K) for h in hs_], "worker": [0] * len(rows)})


def _epoch(cache: WorkerCache, epoch: int, rows: list[tuple[str, int]], wm: int,
           hos: tuple[BinHandover, ...] = (), worker: int = 0) -> tuple[list[tuple[str, int, int]], dict]:
    """One epoch of session_counts (gap 1 000 ms) on `worker`'s cache: its kept outputs
    (user, session start, count) and its task metrics."""
    import session_counts as sc
    from spark_jobs.processing import ProcessorOperator, run_processor

    cfg = SimpleNamespace(bins_bits=K, clock=timers.EpochClock(epoch, 0, wm), op_conf={"ts_columns": ["ts"]},
                          input_topic="in", split=False, merged_from=None)
    writer = ObjectWriter(meta={"epoch": epoch})
    table = _table(rows) if rows else None

    def run(txn: Any) -> Any:
        cache.ensure_bits(txn, K, K)
        return run_processor(cfg, cache, txn, table, len(rows), set(range(1 << K)), writer,
                             ProcessorOperator(sc.SessionCounts), roles=roles(hos, worker))

    _, _, extra = cache.write(run)
    outs = [json.loads(v) for kind, _, v, _ in writer.outputs if kind == OUTPUT]
    return [(o["user"], o["window_start"], o["count"]) for o in outs], extra


def _handed(first: int, since: int, completes: bool = False) -> tuple[BinHandover, ...]:
    return tuple(BinHandover(b, 0, 1, since, first + 1_000, first + 1_000, completes, first) for b in range(1 << K))


def _entries(cache: WorkerCache) -> Counter:
    """The session handover's entries in a cache, by kind."""
    got: Counter = Counter()
    with cache.env.begin(db=cache.data) as txn:
        for b in range(1 << K):
            for kind in (timers.TRACK, timers.OPEN):
                got[kind] += sum(1 for _ in timers.scan(txn, cache.data, b, K, kind, None))
    return got


def test_in_a_cache_each_owner_keeps_its_sessions_and_the_new_one_counts_the_open_keys(tmp_path):
    """F = 10 000 (the step at epoch 1, event times read up to 9 999), gap 1 s: activation 11 000. Key a
    is busy across it, then pauses: its session from 9 500 is the old owner's, the next (from 12 500)
    the new owner's; key b starts after activation: the new owner's; key c has no row since F."""
    old, new = WorkerCache(tmp_path / "x0", "s", "job", 0), WorkerCache(tmp_path / "x1", "s", "job", 1)
    try:
        o0, _ = _epoch(old, 0, [("a", 9_500), ("c", 9_999)], 0)
        ho = _handed(10_000, since=1)
        rows1 = [("a", 10_200), ("a", 11_100), ("b", 11_500)]
        o1, _ = _epoch(old, 1, rows1, 4_999, ho, 0)
        n1, x1 = _epoch(new, 1, rows1, 4_999, ho, 1)
        assert o0 == o1 == n1 == []
        # a: one session 9 500..11 100 (the new owner's copy starts at 10 200), open until 12 100 or a
        # crossing; b: crossing 11 500 (no row of b in the gap before it); the need index: a at 12 100, b at 11 500
        assert set(x1["handover_open"]) == {"0", "1", "2", "3"}, "every bin the new owner is handed reports"
        assert {int(bn): n for bn, n in x1["handover_open"].items() if n} == _open_by_bin(new)
        assert sum(x1["handover_open"].values()) == 2
        assert x1["next_timer_ms"] == 11_500, "the earliest open key comes due like a timer"
        rows2 = [("a", 12_500), ("b", 11_900)]  # a crosses at 12 500; b's row joins its session
        o2, _ = _epoch(old, 2, rows2, 11_500, ho, 0)
        n2, x2 = _epoch(new, 2, rows2, 11_500, ho, 1)
        assert o2 == [("c", 9_999, 1)] and n2 == [], "c's session fired at 10 999: the old owner's"
        assert sum(x2["handover_open"].values()) == 1, "b resolved at its crossing (11 500 <= watermark); a is open"
        o3, _ = _epoch(old, 3, [], 13_000, ho, 0)
        n3, x3 = _epoch(new, 3, [], 13_000, ho, 1)
        assert o3 == [("a", 9_500, 3)] and n3 == [("b", 11_500, 2)], "a's old session at 12 100 <= its crossing"
        assert sum(x3["handover_open"].values()) == 0, "a's crossing 12 500 is final: nothing holds the old owner"
        assert _entries(new)[timers.TRACK] == 2 and _entries(old)[timers.TRACK] == 2
        n4, x4 = _epoch(new, 4, [("a", 13_600)], 13_500, _handed(10_000, since=1, completes=True), 1)
        assert n4 == [("a", 12_500, 1)] and "handover_open" not in x4
        assert _entries(new) == Counter({timers.TRACK: 0, timers.OPEN: 0}), "the completion purges the trackers"
        n5, _ = _epoch(new, 5, [], 20_000)
        assert n5 == [("a", 13_600, 1)]
    finally:
        old.close()
        new.close()


def _open_by_bin(cache: WorkerCache) -> dict[int, int]:
    with cache.env.begin(db=cache.data) as txn:
        return {b: n for b in range(1 << K)
                if (n := sum(1 for _ in timers.scan(txn, cache.data, b, K, timers.OPEN, None)))}


def test_a_superseded_handover_leaves_no_tracker_behind(tmp_path):
    old = WorkerCache(tmp_path / "x0", "s", "job", 0)
    try:
        _epoch(old, 0, [("a", 9_500)], 0)
        _epoch(old, 1, [("a", 11_500), ("b", 12_000)], 4_999, _handed(10_000, since=1), 0)
        assert _entries(old)[timers.TRACK] == 2 and _entries(old)[timers.OPEN] == 0, "the old owner keeps no index"
        outs, _ = _epoch(old, 2, [], 20_000)  # superseded: no handover in the decision any more
        assert sorted(outs) == [("a", 9_500, 1), ("a", 11_500, 1), ("b", 12_000, 1)], "the bin whole, every output"
        assert _entries(old) == Counter({timers.TRACK: 0, timers.OPEN: 0})
    finally:
        old.close()


def test_randomized_through_run_processor_both_owners_outputs_are_a_run_without_a_migration(tmp_path):
    rng = random.Random(5)
    for n in range(12):
        stream = [[(u, t * 100) for u, t in rows] for rows in _stream(rng, 30, 6)]  # 100 ms ticks, gap 10 ticks
        step = rng.randint(2, 20)
        ref = WorkerCache(tmp_path / f"r{n}", "s", "job", 0)
        old, new = WorkerCache(tmp_path / f"o{n}", "s", "job", 0), WorkerCache(tmp_path / f"n{n}", "s", "job", 1)
        want: Counter = Counter()
        got: Counter = Counter()
        event_max, ho, done_at, open_before, wm_before = None, None, None, None, 0
        try:
            for e, rows in enumerate([*stream, [], [], []]):
                wm = 10**7 if e >= len(stream) else max(0, event_max - 600) if event_max is not None else 0
                want.update(_epoch(ref, e, rows, wm)[0])
                if e == step and event_max is not None:
                    ho = _handed(event_max + 1, since=e)
                if ho is not None and done_at is None and e > step and wm_before >= ho[0].boundary_ms \
                        and open_before == 0:
                    done_at = e
                if ho is None:
                    got.update(_epoch(old, e, rows, wm)[0])
                elif done_at is None:
                    got.update(_epoch(old, e, rows, wm, ho, 0)[0])
                    outs, x = _epoch(new, e, rows, wm, ho, 1)
                    got.update(outs)
                    open_before = sum(x.get("handover_open", {}).values())
                else:
                    done = tuple(BinHandover(*h.to_list()[:6], True, h.session_first_ms) for h in ho)
                    got.update(_epoch(new, e, rows, wm, done if e == done_at else (), 1)[0])
                wm_before = wm
                event_max = max([-1 if event_max is None else event_max, *(t for _, t in rows)]) if rows else event_max
        finally:
            for c in (ref, old, new):
                c.close()
        assert ho is None or done_at is not None, "the handover never completed"
        assert got == want, (n, step, stream)


def test_a_split_refiles_a_trackers_entries_with_their_values(tmp_path):
    """A session handover's entries live in the bin's timer index: a split files them under their part."""
    import struct

    from spark_jobs.bins import bin_of_store_key, store_key

    sk = store_key(struct.unpack(">q", b"\x10" + bytes(7))[0], b"k")  # bin 0 at k = 2; part 1 of it at k = 4
    assert bin_of_store_key(sk, 2) == 0 and bin_of_store_key(sk, 4) == 1
    blob = Tracker(120, 125, [(120, 125)]).to_bytes()
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        cache.write(lambda txn: [txn.put(timers.index_key(sk, 2, timers.TRACK, F), blob, db=cache.data),
                                 txn.put(timers.index_key(sk, 2, timers.OPEN, 120), b"k", db=cache.data)])
        log: list = []
        assert cache.write(lambda txn: timers.rehome(txn, cache.data, {0, 1}, 4, lambda *a: log.append(a))) == 2
        assert (1, timers.index_key(sk, 4, timers.TRACK, F), blob) in log
        assert (1, timers.index_key(sk, 4, timers.OPEN, 120), b"k") in log
