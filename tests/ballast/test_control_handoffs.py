"""ballast.control.handoffs: every stage's hand-off crosses an Airflow task boundary as strict JSON
(no tuples, datetimes, inf or nan) and reads back as the same typed value; a dict of another stage
is refused, not half-read."""

from __future__ import annotations

import json
import math

import pytest

from ballast.control import collect
from ballast.control.handoffs import (
    BinLoad,
    EpochSample,
    MapState,
    OperatorSample,
    Placement,
    Resume,
    ScalingDecision,
    Snapshot,
    StoredPlan,
    Verified,
    WorkerSample,
    json_safe,
)

pytestmark = pytest.mark.controlplane


def test_handoffs_round_trip_as_strict_json(db_url, job):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    d = json.loads(json.dumps(snap.to_dict(), allow_nan=False))
    assert Snapshot.from_dict(d) == snap and d["status"] == "ready"
    dec = ScalingDecision(3, "scale_up", 1, 2, 2, "why", float("inf"))
    assert dec.to_dict()["utilization"] is None  # XCom and PostgreSQL JSON refuse inf
    for value in (Placement(2, (0, 1), 1, 10, 1.0), StoredPlan("p", 2, 1, 10, "fluid", 5.0, None, "flow-control"),
                  Verified("p", 3, 2, "table"), Resume("p", "mine")):
        assert type(value).from_dict(json.loads(json.dumps(value.to_dict()))) == value
    with pytest.raises(ValueError, match="unexpected keys \\['bogus'\\]"):
        ScalingDecision.from_dict({**dec.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="not a ready snapshot"):
        Snapshot.from_dict(Resume("p", "mine").to_dict())


def test_json_safe_replaces_non_finite_numbers_and_tuples_at_any_depth() -> None:
    got = json_safe({"a": (1, 2.5, float("nan")), "b": [{"c": -math.inf}], "d": "inf", "e": None, "f": True})
    assert got == {"a": [1, 2.5, None], "b": [{"c": None}], "d": "inf", "e": None, "f": True}
    json.dumps(got, allow_nan=False)
    assert json_safe(0.0) == 0.0 and json_safe(()) == []


def test_a_chains_snapshot_round_trips_with_every_operator() -> None:
    """No DB: a snapshot as collect builds it for a two-operator job, JSON and back."""
    epochs = (EpochSample(4, 100, 900.0, 110.0, 7), EpochSample(5, 120, 950.0, 115.5, 0))
    workers = (WorkerSample(5, 0, 60, 120, 300.0, 400.0), WorkerSample(5, 1, 60, 120, 320.0, 400.0))
    snap = Snapshot(map=MapState(3, 4, 2, (0, 1, 1, 0)), bins=BinLoad((1.0, 2.0, 3.0, 4.5), (10, 20, 30, 40),
                                                                      (1, 2, 3, 4), 2),
                    epochs=epochs, workers=workers, latest_epoch=5,
                    flow=(OperatorSample("split", 2, epochs, workers), OperatorSample("counts", 1)))
    d = json.loads(json.dumps(snap.to_dict(), allow_nan=False))
    assert d["map"]["assignment"] == [0, 1, 1, 0] and d["flow"][1] == {"name": "counts", "workers": 1,
                                                                       "epochs": [], "samples": []}
    assert Snapshot.from_dict(d) == snap


def test_a_snapshot_with_a_stray_field_in_a_sample_is_refused() -> None:
    d = Snapshot(MapState(0, 0, 1, (0, 0)), BinLoad((0.0, 0.0), (0, 0), (0, 0)),
                 epochs=(EpochSample(1, 1, 1.0, 1.0, 0),)).to_dict()
    d["epochs"][0]["lag"] = 3
    with pytest.raises(ValueError, match=r"EpochSample.from_dict: unexpected keys \['lag'\]"):
        Snapshot.from_dict(d)


def test_a_placement_reads_its_assignment_back_as_a_tuple() -> None:
    p = Placement.from_dict({"target_workers": 2, "assignment": [0, 1, 1], "bins_moved": 1, "bytes_moved": 5,
                             "max_over_mean": 1.5})
    assert p.assignment == (0, 1, 1) and p == Placement(2, (0, 1, 1), 1, 5, 1.5)
    assert p.to_dict()["assignment"] == [0, 1, 1]


def test_a_resume_says_so_and_is_not_a_decision() -> None:
    r = Resume("p-1", "mine")
    assert r.to_dict() == {"plan_id": "p-1", "reason": "mine", "status": "resume"}
    with pytest.raises(ValueError, match="unexpected keys"):
        ScalingDecision.from_dict(r.to_dict())
