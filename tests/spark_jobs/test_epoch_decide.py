"""spark_jobs.epoch_decide: steps 1–2 of an epoch count its input from the offset log's ranges,
decide over its control records and log the decision before anything moves; a replayed epoch
reuses the logged decision (and writes its decision rows again); an epoch the offset log cannot
place fails with what to do. Fast: a real journal on disk, the clients and the fence stood in."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs.control import ControlRecord
from spark_jobs.epoch_decide import EpochDecide, EpochUnreadable
from spark_jobs.epoch_times import EpochTimes
from spark_jobs.journal import Journal
from spark_jobs.run_config import RunConfig
from tests.helpers.control import control_step

pytestmark = pytest.mark.dataplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


class _Clients:
    """The epoch's ranges and control records as given; DB calls recorded, Kafka calls made."""

    def __init__(self, ranges: dict[str, dict[int, tuple[int, int]]] | None, control: list[Any]) -> None:
        self.ranges, self.control, self.db_calls = ranges, control, []
        self.consumer = None

    def offset_ranges(self, epoch: int) -> dict[str, dict[int, tuple[int, int]]] | None:
        return self.ranges

    def kafka(self, what: str, fn: Any, *args: Any) -> Any:
        return self.control

    def db(self, what: str, fn: Any, *args: Any) -> None:
        self.db_calls.append(what)


def _decider(tmp_path, clients: _Clients) -> tuple[EpochDecide, Journal, list[str]]:
    cfg = RunConfig(job="j", input_topic="in", checkpoint_dir=str(tmp_path), bootstrap="-", db_url="sqlite://",
                    operator="op", bins=8, workers=2)
    journal, guarded = Journal(cfg.checkpoint_dir), []
    fencing = SimpleNamespace(guard=guarded.append, fence=None)
    return EpochDecide(cfg, clients, journal, fencing, "j.control"), journal, guarded


def test_an_epoch_is_counted_decided_and_logged_before_anything_moves(tmp_path):
    step = control_step(job="j", op="op", moves=((0, 0, 1),))
    ranges = {"in": {0: (10, 25), 1: (5, 5)}, "j.control": {0: (3, 4)}}
    clients = _Clients(ranges, [ControlRecord("0:3", step.to_json())])
    decider, journal, guarded = _decider(tmp_path, clients)
    got = decider.run(7, NOW, EpochTimes())
    assert (got.input_rows, got.control_rows, got.replay) == (15, 1, False)
    assert got.end_offsets == {("in", 0): 25, ("in", 1): 5}
    assert got.decision.applied is not None and got.decision.state_after.map_version == 1
    assert guarded == ["the decision of epoch 7"] and journal.load_decision(7) is not None
    assert clients.db_calls == ["the decision log"]

    again = decider.run(7, NOW, EpochTimes())  # Spark replays the epoch: the logged decision, not a new one
    assert again.replay and again.decision.to_dict() == got.decision.to_dict()
    assert guarded == ["the decision of epoch 7"] and clients.db_calls == ["the decision log"] * 2


def test_an_epoch_the_offset_log_cannot_place_fails_with_what_to_do(tmp_path):
    decider, _, _ = _decider(tmp_path, _Clients(None, []))
    with pytest.raises(EpochUnreadable, match="epoch 4 or 3: the checkpoint was damaged or edited"):
        decider.run(4, NOW, EpochTimes())
