"""ballast.store.traces: an epoch's trace round-trips through its compact row (a replay replaces
it), a window of epochs reads back as one trace, and the export command writes Chrome JSON with the
window's critical participation, or says why it cannot (on SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ballast.store import traces, writer
from ballast.tracing import Activity, Message, Trace
from tests.helpers import dialects

pytestmark = pytest.mark.controlplane
any_db = dialects.any_db


def _epoch(t0: int, slow_fold: int) -> Trace:
    return Trace((Activity("driver", "plan", t0, t0 + 10), Activity("worker 0", "fold", t0 + 12, t0 + 40),
                  Activity("worker 1", "fold", t0 + 12, t0 + 12 + slow_fold),
                  Activity("driver", "job end", t0 + 12 + slow_fold, t0 + 20 + slow_fold)),
                 (Message(0, 1, "source stage"), Message(0, 2, "source stage"), Message(2, 3, "task end")))


def _store(url: str, job: str, epoch: int, trace: Trace) -> None:
    with writer.epoch_transaction(url) as s:
        traces.replace_trace(s, traces.trace_row(job, "keycount", epoch, trace))


def test_a_trace_round_trips_and_a_replay_replaces_it(any_db, unique_name):
    _store(any_db, unique_name, 4, _epoch(1000, 50))
    _store(any_db, unique_name, 4, _epoch(1000, 88))  # the replayed epoch's
    got = traces.read_trace(any_db, unique_name, "keycount")
    assert got.activities == tuple(Activity(a.timeline, a.kind, a.start_us, a.end_us, 4)
                                   for a in _epoch(1000, 88).activities)
    assert got.messages == _epoch(1000, 88).messages
    assert (unique_name, "keycount") in traces.traced_operators(any_db)  # once, though stored twice
    assert traces.traced_operators(any_db).count((unique_name, "keycount")) == 1


def test_a_window_of_epochs_reads_as_one_trace_and_exports_with_its_cp(any_db, unique_name, tmp_path, capsys):
    writer.ensure_job_row(any_db, unique_name, "keycount", 8, {}, datetime.now(UTC))
    for e in range(1, 6):
        _store(any_db, unique_name, e, _epoch(e * 10_000, 88 if e % 2 else 20))
    assert traces.last_epochs(any_db, unique_name, "keycount", 3) == (3, 5)
    window = traces.read_trace(any_db, unique_name, "keycount", 2, 4)
    assert {a.epoch for a in window.activities} == {2, 3, 4} and len(window.messages) == 9
    out = tmp_path / "t.json"
    assert traces.main(["export", "--job", unique_name, "--last", "3", "-o", str(out), "--db-url", any_db]) == 0
    doc = json.loads(out.read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 12 and {e["args"]["epoch"] for e in xs} == {3, 4, 5}
    assert "fold on worker 1 holds" in capsys.readouterr().out
    assert traces.main(["export", "--job", unique_name + "-none", "--operator", "keycount", "-o", str(out),
                        "--db-url", any_db]) == 2
    assert "no trace stored" in capsys.readouterr().err
