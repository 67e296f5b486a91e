"""ballast.console_trace: the console's critical-path view from stored traces — the sentence that
names the bottleneck, CP per epoch of the largest activities (summing to 100 % with "other"), the
newest epoch's timeline with its critical activities marked; a job without a stored trace says so.
On a migrated SQLite DB, no services."""

from __future__ import annotations

import pytest

from ballast.console_trace import critical_view
from ballast.store import traces, writer
from ballast.tracing import Activity, Message, Trace

pytestmark = pytest.mark.controlplane


def _epoch(t0: int) -> Trace:
    """The driver plans, two workers fold, worker 1 finishes last and releases the driver's job end."""
    return Trace((Activity("driver", "plan", t0, t0 + 10), Activity("worker 0", "fold", t0 + 12, t0 + 30),
                  Activity("worker 1", "fold", t0 + 12, t0 + 90), Activity("driver", "job end", t0 + 90, t0 + 100)),
                 (Message(0, 1, "source stage"), Message(0, 2, "source stage"), Message(2, 3, "task end")))


def test_the_view_names_the_bottleneck_and_marks_the_newest_epochs_critical_path(db_url):
    for e in range(1, 5):
        with writer.epoch_transaction(db_url) as s:
            traces.replace_trace(s, traces.trace_row("j", "keycount", e, _epoch(e * 1000)))
    v = critical_view(db_url, "j", "keycount", last=3)
    assert v["epochs"] == [2, 3, 4] and v["latest_epoch"] == 4 and v["length_ms"] == [0.1, 0.1, 0.1]
    assert v["bottleneck"] == "Over epochs 2–4: fold on worker 1 holds 78% of the critical path."
    assert v["names"][0] == "fold on worker 1" and v["names"][-1] == "other"
    for i in range(3):
        assert sum(v["shares"][n][i] for n in v["names"]) == pytest.approx(1.0, abs=1e-3)
    marks = {(a["timeline"], a["kind"]): a["cp"] > 0 for a in v["timeline"]}
    assert marks == {("driver", "plan"): True, ("worker 1", "fold"): True, ("worker 0", "fold"): False,
                     ("driver", "job end"): True}
    assert [a["start_ms"] for a in v["timeline"] if a["kind"] == "plan"] == [0.0]


def test_a_job_without_a_stored_trace_says_so(db_url):
    v = critical_view(db_url, "nobody", "keycount")
    assert v["epochs"] == [] and v["bottleneck"].startswith("No trace stored yet")
