"""spark_jobs.epoch_commit: an epoch's end writes its map, step checkpoints, events, metrics and
heartbeat in one metrics-DB transaction, idempotently (a replay rewrites the same rows and owes
the same acks); a duplicate step is acked again from its stored checkpoint; the moves' summary is
the receivers' work, the slowest receiver's time. On a migrated SQLite DB, no services."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from ballast.protocol import Move, acks_topic, message_key
from ballast.store.event_log import CACHE_DEGRADED
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.control import ControlRecord, decide
from spark_jobs.control_state import AppliedStep, initial_state
from spark_jobs.epoch_commit import EpochCommit, EpochReport, summarize_moves
from spark_jobs.run_config import RunConfig
from tests.helpers.control import control_step as _step

pytestmark = pytest.mark.dataplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


class Commit(EpochCommit):
    """The component with no driver token and a producer that records what it sends."""

    def __init__(self, db_url: str, scaler: Any = None) -> None:
        cfg = RunConfig(job="j", input_topic="in", checkpoint_dir="/c", bootstrap="-", db_url=db_url, bins=8)
        clients = SimpleNamespace(producer=SimpleNamespace(send=self._send, flush=self._flush))
        super().__init__(cfg, clients, SimpleNamespace(fence=None), threading.Event(),  # type: ignore[arg-type]
                         NOW - timedelta(minutes=5))
        self.scaler = scaler
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.flushed = 0

    def _send(self, topic: str, key: bytes, value: bytes) -> Any:
        self.sent.append((topic, key, value))
        return SimpleNamespace(get=lambda timeout: None)

    def _flush(self, timeout: float) -> None:
        self.flushed += 1




def _decide(msgs: list[bytes], epoch: int = 4, st: Any = None) -> Any:
    recs = [ControlRecord(f"0:{i}", msg) for i, msg in enumerate(msgs)]
    return decide(st or initial_state(8, 2), recs, epoch=epoch, now=NOW, job="j", operator="keycount",
                  max_future_s=3600)


def _doc(worker: int, bins: dict[str, list[int]], **extra: Any) -> dict[str, Any]:
    return {"worker": worker, "records_in": 10, "records_out": 9, "dead_letters": 1, "useful_ms": 5.0,
            "wall_ms": 8.0, "state_keys": 3, "state_bytes": 30, "bins": bins, **extra}


MOVES = {"bins": 1, "keys": 7, "bytes": 70, "ms": 12.5, "completed_at": (NOW + timedelta(seconds=1)).isoformat()}


def _commit(c: Commit, d: Any, docs: list[dict[str, Any]], epoch: int = 4) -> list[bytes]:
    return c.commit(_report(epoch, d, docs))


def _report(epoch: int, d: Any, docs: list[dict[str, Any]], replay: bool = False) -> EpochReport:
    return EpochReport(epoch=epoch, decision=d, moves=MOVES if d.applied else None, workers=docs, started_at=NOW,
                       ended_at=NOW + timedelta(seconds=2), batch_ms=2000.0, input_rows=20, control_rows=2,
                       backlog=100, rate=10.0, end_offsets={"in:0": 20}, replay=replay)


def _rows(url: str, model: Any) -> list[Any]:
    with session_scope(url) as s:
        return list(s.scalars(select(model)))


def test_an_epoch_writes_its_map_checkpoint_event_metrics_and_heartbeat_once(db_url):
    c = Commit(db_url)
    d = _decide([_step().to_json(), b"{not json"])
    docs = [_doc(0, {"1": [4, 2, 20]}), _doc(1, {"0": [6, 1, 10]}, cache={"message": "rebuilt", "since_epoch": 3})]
    acks = _commit(c, d, docs)
    again = _commit(c, d, docs)  # a replay of the epoch
    by_status = {json.loads(a)["status"]: json.loads(a) for a in acks}
    assert len(acks) == 2 and set(by_status) == {"applied", "rejected"} and again == acks
    applied, rejected = by_status["applied"], by_status["rejected"]
    assert (applied["plan_id"], applied["applied_epoch"], applied["bins_moved"], applied["keys_moved"],
            applied["bytes_moved"], applied["migration_ms"], applied["map_version_after"]) == ("p", 4, 1, 7, 70,
                                                                                              12.5, 1)
    assert applied["message_offset"] == "0:0" and rejected["message_offset"] == "0:1" and rejected["reason"]
    [rm] = _rows(db_url, m.RoutingMap)
    assert (rm.map_version, rm.epoch, rm.assignment[0], rm.plan_id, rm.step) == (1, 4, 1, "p", 1)
    [cp] = _rows(db_url, m.StepCheckpoint)
    assert (cp.status, cp.applied_epoch, cp.keys_moved) == ("applied", 4, 7)
    events = {e.kind: e for e in _rows(db_url, m.Event)}
    assert set(events) == {"control_rejected", CACHE_DEGRADED}
    assert events[CACHE_DEGRADED].epoch == 3 and events[CACHE_DEGRADED].message == "worker 1: rebuilt"
    [em] = _rows(db_url, m.EpochMetrics)
    assert (em.epoch, em.map_version, em.workers, em.input_rows, em.dead_letters, em.migration_ms) == (
        4, 1, 2, 20, 2, 12.5)
    assert sorted((w.worker, w.records_in) for w in _rows(db_url, m.WorkerMetrics)) == [(0, 10), (1, 10)]
    assert sorted((b.bin, b.worker, b.records) for b in _rows(db_url, m.BinMetrics)) == [(0, 1, 6), (1, 0, 4)]
    [hb] = _rows(db_url, m.Heartbeat)
    assert (hb.last_epoch, hb.map_version, hb.status, hb.executors) == (4, 1, "running", None)


def test_a_duplicate_step_is_acked_again_from_its_checkpoint(db_url):
    c = Commit(db_url)
    first = _decide([_step().to_json()])
    [ack] = _commit(c, first, [_doc(0, {}), _doc(1, {})])
    dup = _decide([_step().to_json()], epoch=5, st=first.state_after)
    [again] = _commit(c, dup, [_doc(0, {}), _doc(1, {})], epoch=5)
    a, b = json.loads(ack), json.loads(again)
    assert b["extra"] == {"duplicate": True} and b["applied_epoch"] == 4 and b["message_offset"] == "0:0"
    assert {k: v for k, v in a.items() if k != "extra"} == {k: v for k, v in b.items() if k != "extra"}
    assert len(_rows(db_url, m.StepCheckpoint)) == 1


def test_a_bin_applied_off_its_worker_is_logged_as_a_violation(db_url, caplog):
    c = Commit(db_url)
    with caplog.at_level(logging.ERROR, "ballast.runner"):
        _commit(c, _decide([]), [_doc(1, {"0": [1, 1, 1]})])  # bin 0 is worker 0's under the uniform map
    assert "migration property violated: bin 0 applied by worker 1 at epoch 4, map says 0" in caplog.text


def test_acks_go_to_the_acks_topic_under_the_operators_key(db_url):
    c = Commit(db_url)
    c.send_acks([])
    assert c.sent == [] and c.flushed == 0
    c.send_acks([b"a1", b"a2"])
    assert c.sent == [(acks_topic("j"), message_key("j", "keycount"), b"a1"),
                      (acks_topic("j"), message_key("j", "keycount"), b"a2")] and c.flushed == 1


def test_an_epoch_without_tasks_reports_the_last_known_state_size(db_url):
    c = Commit(db_url)
    assert c.worker_metrics(2, None) == [
        {"worker": w, "records_in": 0, "records_out": 0, "dead_letters": 0, "useful_ms": 0.0, "wall_ms": 0.0,
         "state_keys": 0, "state_bytes": 0, "bins": {}} for w in (0, 1)]
    docs = c.worker_metrics(2, [_doc(0, {}), _doc(1, {}), _doc(2, {})])  # worker 2: only a warm-up task
    assert [d["worker"] for d in docs] == [0, 1] and c._last_state == {0: (3, 30), 1: (3, 30)}
    assert [(d["state_keys"], d["state_bytes"]) for d in c.worker_metrics(3, None)] == [(3, 30), (3, 30), (0, 0)]


def test_the_capacity_is_asked_at_most_every_30_seconds(db_url, monkeypatch):
    import spark_jobs.epoch_commit as E

    asked: list[int] = []
    c = Commit(db_url, scaler=SimpleNamespace(capacity=lambda: asked.append(1) or 6, held=lambda: 3))
    clock = iter([100.0, 100.0, 110.0, 131.0, 131.0])
    monkeypatch.setattr(E.time, "time", lambda: next(clock))
    assert [c.cluster_capacity() for _ in range(3)] == [6, 6, 6] and len(asked) == 2
    assert Commit(db_url).cluster_capacity() is None


def test_the_moves_summary_is_the_receivers_work_and_the_slowest_receivers_time():
    applied = AppliedStep("p", 1, "moves", (Move(3, 0, 1), Move(5, 1, 2), Move(6, 0, 2)), workers_before=3,
                          workers=3, bins_before=8, bins=8, map_version_before=0, map_version_after=1)
    docs = [{"worker": 1, "moved_in": {"3": {"keys": 10, "bytes": 100, "ms": 50.0, "mode": "load"}}},
            {"worker": 2, "moved_in": {"5": {"keys": 1, "bytes": 10, "ms": 30.0, "mode": "catchup"},
                                       "6": {"keys": 2, "bytes": 20, "ms": 40.0, "mode": "warm"},
                                       "7": {"keys": 99, "bytes": 999, "ms": 999.0, "mode": "load"}}},
            {"worker": 0}]
    s = summarize_moves(applied, docs)
    assert (s["bins"], s["keys"], s["bytes"], s["ms"]) == (3, 13, 130, 70.0), "bin 7 is not this step's"
    assert [(p["bin"], p["from"], p["to"], p["mode"]) for p in s["per_bin"]] == [
        (3, 0, 1, "load"), (5, 1, 2, "catchup"), (6, 0, 2, "warm")]
    assert datetime.fromisoformat(s["completed_at"]).tzinfo is not None


def test_the_epochs_log_line_says_what_happened(db_url, caplog):
    c = Commit(db_url)
    d = _decide([_step().to_json()])
    with caplog.at_level(logging.INFO, "ballast.runner"):
        c.log_epoch(_report(4, d, [_doc(0, {}), {**_doc(1, {}), "useful_ms": 9.0}], replay=True))
    line = caplog.records[-1].getMessage()
    assert line.startswith("epoch 4 (replay): rows=20 W=2 B=8 map=v1 steps: apply=p#1 moved 1 bins/7 keys/70 B")
    assert "max worker useful 9 ms" in line and "backlog=100 queued=0" in line


def test_an_epochs_trace_is_stored_in_its_own_token_checked_transaction(db_url):
    from ballast.store.traces import read_trace
    from ballast.tracing import Activity, Trace

    c = Commit(db_url)
    trace = Trace((Activity("driver", "plan", 10, 20), Activity("driver", "db", 20, 45)))
    c.store_trace(4, trace)
    c.store_trace(4, trace)  # a replayed epoch's tail replaces it
    got = read_trace(db_url, "j", "keycount")
    assert [(a.epoch, a.kind, a.start_us, a.end_us) for a in got.activities] == [(4, "plan", 10, 20), (4, "db", 20, 45)]


def test_a_stale_drivers_trace_is_refused_and_stores_nothing(db_url):
    from ballast.store import fencing
    from ballast.store.traces import read_trace
    from ballast.tracing import Activity, Trace

    c = Commit(db_url)
    c._fencing = SimpleNamespace(fence=fencing.take_token(db_url, "j", "keycount", NOW))
    fencing.take_token(db_url, "j", "keycount", NOW)  # a newer driver started: this one is a zombie
    with pytest.raises(fencing.Fenced):
        c.store_trace(4, Trace((Activity("driver", "plan", 10, 20),)))
    assert read_trace(db_url, "j", "keycount").activities == ()
