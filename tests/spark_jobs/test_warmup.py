"""spark_jobs.warmup: before the first epoch, each Python worker imports the job's modules, opens its
cache and runs one epoch on scratch state that it deletes, with crash injection off; a failed
warm-up is only logged; the warm-up's Kafka record is one tick; caches live under the checkpoint in
local mode; the warmed Python workers are the pool an epoch's mapInArrow runs in (the session's real
Spark). Elsewhere Spark is faked: the functions Spark would run are called directly."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.cache import WorkerCache, cache_path
from spark_jobs.nexmark.stateless import Q1
from spark_jobs.stateless import StatelessOperator
from spark_jobs.warmup import WarmUp, _emit_tick, default_cache_dir, warm_worker

pytestmark = pytest.mark.dataplane


def warm_up(spark: Any, op: Any, handoff: tuple[str, ...] = ()) -> WarmUp:
    cfg = SimpleNamespace(cache_dir=None, path="keycount", job="j")
    return WarmUp(spark, cfg, op, None, SimpleNamespace(handoff=handoff), None)  # type: ignore[arg-type]


def cache_dir_of(master: str = "local[2]", cache_dir: str | None = None, ckpt_local: bool = True) -> str | None:
    cfg = SimpleNamespace(cache_dir=cache_dir)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master=master))
    journal = SimpleNamespace(root=SimpleNamespace(is_local=ckpt_local, path="/ck"))
    return default_cache_dir(cfg, spark, journal)  # type: ignore[arg-type]


@pytest.fixture
def scratch(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """tempfile's directory, to see what the warm-up leaves there."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_caches_go_where_the_flag_says_else_under_a_local_checkpoint():
    assert cache_dir_of(cache_dir="/fast/disk") == "/fast/disk"
    assert cache_dir_of() == "/ck/cache", "a restart finds its caches warm"
    assert cache_dir_of(ckpt_local=False) is None
    assert cache_dir_of(master="spark://m:7077") is None, "each executor's own directory"


def test_a_python_worker_warms_its_cache_and_one_epoch_on_scratch_state(tmp_path, scratch):
    warm_worker("keycount", "j", str(tmp_path / "caches"), "store-1", 3)
    with WorkerCache(tmp_path / "caches", "store-1", "j", 3) as c:
        assert not c.created and c.write(lambda txn: c.last_applied(txn)) == -1, "opened, nothing applied"
    assert list(scratch.iterdir()) == [], "the scratch epoch's cache and state are deleted"


def test_a_processor_warms_no_epoch_and_a_cache_that_cannot_open_is_left_to_the_first_epoch(tmp_path, scratch):
    (tmp_path / "caches").write_text("a file where the caches would go")
    spec_op = "spark_jobs.nexmark.winning:WinningBids"
    warm_worker(spec_op, "j", str(tmp_path / "caches"), "store-1", 0)
    warm_worker("keycount", "j", str(tmp_path / "other"), "", 1)
    assert not cache_path(tmp_path / "other", "", 1).exists(), "no store yet: no cache"


def test_the_scratch_epoch_fires_no_fault_point(tmp_path):
    faults = tmp_path / "faults"
    faults.write_text("worker_prepared 1\nworker_before_commit 1\n")
    code = "from spark_jobs.warmup import _warm_task; _warm_task('keycount', 'j', 0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "BALLAST_FAULTS_FILE": str(faults)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert faults.read_text() == "worker_prepared 1\nworker_before_commit 1\n"


def test_a_failed_warm_up_is_only_logged(caplog):
    def boom(*a: Any) -> Any:
        raise RuntimeError("no executors yet")

    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"), range=boom)
    with caplog.at_level(logging.WARNING, "ballast.runner"):
        assert warm_up(spark, object()).workers(2, None, "") == []
    assert "warm-up failed; the first epoch starts the Python workers itself" in caplog.text


def test_a_stateless_query_and_a_hand_off_input_skip_their_warm_ups():
    called: list[str] = []
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"), range=lambda *a: called.append("range"))
    warm_up(spark, StatelessOperator(Q1)).workers(2, None, "")  # every stage in the JVM: no Python worker
    warm_up(spark, object(), handoff=("j.a.out",)).plan(None, 3, 2)  # its deduplication reads the journal
    assert called == []


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_warm_up_starts_the_python_workers_that_the_epochs_run_in(spark):
    """Spark keeps one pool of Python workers (a daemon and its forks) per environment, and its SQL
    runners' environment differs from an RDD's: warmed through an RDD, the workers were a second
    pool that no epoch's mapInArrow ever used."""
    pids = warm_up(spark, object()).workers(2, None, "")
    assert pids, "the warm-up ran no task"

    def parent(batches: Any) -> Any:
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"ppid": os.getppid()}], pa.schema([("ppid", pa.int32())]))

    epochs = {r["ppid"] for r in spark.range(0, 4, 1, 4).mapInArrow(parent, "ppid INT").collect()}
    assert {_parent(p) for p in pids} == epochs, "the warmed workers and an epoch's tasks are forks of one daemon"


def test_the_warm_up_writes_one_tick_per_worker_whatever_it_reads():
    fn = _emit_tick("j.control.ticks", b"j/keycount", b"tick")
    read = []
    batches = (read.append(i) or pa.record_batch({"x": [i]}) for i in range(3))
    [rb] = list(fn(batches))
    assert read == [0, 1, 2], "its input is drained"
    assert rb.to_pylist() == [{"topic": "j.control.ticks", "key": b"j/keycount", "value": b"tick", "headers": []}]


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_the_synthetic_handover_routes_through_the_fan_out_at_any_worker_count(workers):
    from spark_jobs.handover import fan_out
    from spark_jobs.warmup import _warm_handover

    h = _warm_handover(workers)
    assert 0 <= h.dst < workers and not h.completes
    assert fan_out((h,), 64) is not None, "the warm-up must compile the explode, not the plain routing"


def test_only_an_operator_that_declares_windows_warms_the_handover():
    windowed = SimpleNamespace(spec=SimpleNamespace(window=object()))
    assert warm_up(None, windowed)._hands_over()
    assert not warm_up(None, SimpleNamespace(spec=SimpleNamespace(window=None)))._hands_over()
    assert not warm_up(None, Q1)._hands_over(), "a stateless query has no spec"
