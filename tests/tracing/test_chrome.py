"""ballast.tracing.chrome: a trace becomes Chrome trace-event JSON: one named thread per timeline
(driver first, workers by number), a complete event per activity with its epoch, label and
critical participation, a flow arrow per message; it serialises as JSON."""

from __future__ import annotations

import json

import pytest

from ballast.tracing import Activity, Message, Trace, chrome_trace, critical_participation, snapshot

pytestmark = pytest.mark.controlplane


def test_timelines_are_threads_activities_complete_events_and_messages_flows():
    acts = (Activity("worker 10", "fold", 12, 40, epoch=3, label="bins 4,5"), Activity("driver", "plan", 0, 10, 3),
            Activity("worker 2", "fold", 12, 90, 3), Activity("driver", "commit", 91, 100, 3))
    trace = Trace(acts, (Message(1, 0), Message(1, 2), Message(2, 3)))
    doc = json.loads(json.dumps(chrome_trace(trace, "clicks", critical_participation(snapshot(trace)))))
    ev = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert [names[t] for t in sorted(names)] == ["driver", "worker 2", "worker 10"]
    assert next(e for e in ev if e["name"] == "process_name")["args"]["name"] == "ballast job clicks"
    complete = {(names[e["tid"]], e["name"]): e for e in ev if e["ph"] == "X"}
    fold10 = complete[("worker 10", "fold")]
    assert (fold10["ts"], fold10["dur"], fold10["args"]["epoch"], fold10["args"]["label"]) == (12, 28, 3, "bins 4,5")
    assert fold10["args"]["critical_participation"] == 0 and fold10["cat"] == "fold", "it finished early"
    slow = complete[("worker 2", "fold")]
    assert slow["cat"] == "critical" and slow["args"]["critical_participation"] == pytest.approx(78 / 100)
    flows = [e for e in ev if e["ph"] in "sf"]
    assert len(flows) == 6 and {e["id"] for e in flows} == {1, 2, 3}
    start = {e["id"]: e for e in flows if e["ph"] == "s"}
    assert (names[start[3]["tid"]], start[3]["ts"]) == ("worker 2", 90)
    assert doc["displayTimeUnit"] == "ms"


def test_without_participation_no_activity_is_marked_critical():
    doc = chrome_trace(Trace((Activity("driver", "plan", 0, 10),)), "j")
    [x] = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert x["cat"] == "plan" and "critical_participation" not in x["args"]


def test_over_several_epochs_each_activity_gets_its_own_participation():
    """A window of two epochs (the export's `epochs_participation`): each epoch's critical fold is
    marked critical in its own epoch. Each epoch's analysis numbers its activities from 0; they were
    once attributed to the first epoch's activities, so only epoch 0 showed any CP."""
    from ballast.tracing import epochs_participation

    acts = []
    for ep, t in ((0, 0), (1, 1_000)):
        acts += [Activity("driver", "plan", t, t + 10, ep), Activity("worker 1", "fold", t + 10, t + 80, ep),
                 Activity("worker 2", "fold", t + 10, t + 30, ep), Activity("driver", "commit", t + 80, t + 90, ep)]
    msgs = tuple(Message(b + s, b + d) for b in (0, 4) for s, d in ((0, 1), (0, 2), (1, 3)))
    doc = chrome_trace(Trace(tuple(acts), msgs), "clicks", epochs_participation(Trace(tuple(acts), msgs)))
    cps = [(e["args"]["epoch"], e["tid"], e["name"], e["args"]["critical_participation"])
           for e in doc["traceEvents"] if e["ph"] == "X"]
    slow = [cp for ep, _, name, cp in cps if name == "fold" and cp > 0]
    assert len(slow) == 2 and slow[0] == pytest.approx(slow[1]) == pytest.approx(70 / 90 / 2), cps
    assert {ep for ep, _, _, cp in cps if cp > 0} == {0, 1}
    assert sum(cp for *_, cp in cps) == pytest.approx(1.0, abs=1e-4)  # each rounded to 6 places
