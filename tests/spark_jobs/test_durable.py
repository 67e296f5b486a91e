"""spark_jobs.durable: a store refuses another job's state; a start on a rolled-back checkpoint, or
on an epoch without task output, is an error; retention asks the driver's fencing check before
it deletes, and a refusal deletes nothing. Epochs come from tests/helpers/worker_epochs.py."""

from __future__ import annotations

import pytest

from spark_jobs.durable import DurableState, StateGap, StoreMismatch
from spark_jobs.storage import Location
from tests.helpers.worker_epochs import Harness, keys_of

pytestmark = pytest.mark.dataplane


def test_a_store_refuses_another_jobs_state(tmp_path):
    DurableState(str(tmp_path / "s"), "j", 8)
    with pytest.raises(StoreMismatch, match="belongs to job 'j'"):
        DurableState(str(tmp_path / "s"), "other", 8)
    with pytest.raises(StoreMismatch):
        DurableState(str(tmp_path / "s"), "j", 16)


def test_rolled_back_checkpoint_and_missing_task_output_are_errors(tmp_path):
    hz = Harness(tmp_path, workers=2, snapshot_every=2)
    for e in range(8):
        hz.run_epoch(keys_of(50, e))
    hz.ds.check_against(7)  # Spark committed everything: fine
    hz.ds.check_against(6)  # the last epoch's commit lost in a crash: a replay, fine
    with pytest.raises(StateGap, match="rolled back"):
        hz.ds.check_against(3)
    with pytest.raises(StateGap, match="no changelog object"):
        hz.ds.commit_epoch(99, hz.version, 2, False)


def test_retention_asks_before_it_deletes_and_a_refusal_deletes_nothing(tmp_path, monkeypatch):
    """The driver's token check runs before retention deletes anything (and only then): a stale
    driver's refused check leaves every epoch's objects in place."""
    hz = Harness(tmp_path, workers=2, snapshot_every=1)
    monkeypatch.setattr(hz.ds, "retain", lambda *a: 0)  # the harness's own retention: off while epochs pile up
    for e in range(6):
        hz.run_epoch(keys_of(100, e))
    monkeypatch.undo()
    epoch0 = Location.of(hz.uri) / "changelog" / "000000000000"
    kept = [e.epoch for e in hz.ds.entries]

    class Refused(RuntimeError):
        pass

    def refuse() -> None:
        raise Refused("a newer driver took over")

    with pytest.raises(Refused):
        hz.ds.retain(refuse)
    assert epoch0.exists() and [e.epoch for e in hz.ds.entries] == kept
    asked: list[int] = []
    dropped = hz.ds.retain(lambda: asked.append(1))
    assert asked == [1] and dropped > 0 and not epoch0.exists()
    assert hz.ds.retain(refuse) == 0  # nothing left to delete: no check needed
    assert hz.durable_counts() == dict(hz.ref)
