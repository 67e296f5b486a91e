"""DS2 over a multi-operator job: the collect stage builds one node per operator from the
metrics DB (real SQLite rows), with each operator's measured selectivity, and a bottleneck on the
SECOND operator scales the second operator while the first stays as it is."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from ballast import policy
from ballast.config import load_jobs
from ballast.control import collect, evaluate
from ballast.control.handoffs import Snapshot
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.jobs import seed_job

pytestmark = pytest.mark.controlplane

JOBS = """jobs:
  - job: {job}
    input_topic: {job}.in
    bins: 16
    max_workers: 8
    operators:
      - {{name: split, operator: wordcount}}
      - {{name: counts, operator: keycount}}
    rebalance: {{window_epochs: 5, warmup_s: 0, warmup_epochs: 0}}
"""


def test_a_bottleneck_on_the_second_operator_scales_the_second(db_url, tmp_path, unique_name):
    job = unique_name
    cfg = load_jobs(_write(tmp_path, JOBS.format(job=job)))[job]
    assert cfg.operator == "split" and cfg.operator_names() == ["split", "counts"]
    assert cfg.operator_args() == ["--operator", "split=wordcount", "--operator", "counts=keycount"]
    # 15k rows/s in; `split` does 100k/s per worker and emits 2 records per input; `counts` does 10k/s
    seed_job(db_url, job, operator="split", per_worker_rate=100_000.0)
    seed_job(db_url, job, operator="counts", per_worker_rate=10_000.0)
    with session_scope(db_url) as s:
        s.execute(update(m.WorkerMetrics).where(m.WorkerMetrics.operator == "split")
                  .values(records_out=m.WorkerMetrics.records_in * 2))
    now = datetime.now(UTC)
    out = {}
    for name in cfg.operator_names():
        snap = collect.collect(db_url, cfg.for_operator(name))
        assert isinstance(snap, Snapshot) and [o.name for o in snap.flow] == ["split", "counts"]
        assert Snapshot.from_dict(snap.to_dict()) == snap
        out[name] = evaluate.assess(cfg.for_operator(name), snap, policy.GuardState(), now)
    counts, split = out["counts"], out["split"]
    assert split.inputs["ds2.split.selectivity"] == pytest.approx(2.0)
    assert split.inputs["ds2.model"] == "pipelined"
    # counts must absorb 2 × 15k = 30k rows/s at 10k per worker and 70 % utilization: 5 workers
    assert (counts.action, counts.current_workers, counts.target_workers) == ("scale_up", 1, 5)
    assert counts.utilization == pytest.approx(3.0)
    assert (split.action, split.target_workers) == ("no_change", 1)


def _write(tmp_path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "jobs.yaml"
    p.write_text(text)
    return p


def test_the_rebalance_dag_decides_each_operator_of_a_chain(airflow_db, tmp_path, monkeypatch, unique_name):
    import inspect
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("BALLAST_JOBS_FILE", str(_write(tmp_path, JOBS.format(job=unique_name))))
    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags"))
    assert bag.import_errors == {}
    dag = bag.get_dag(f"ballast_rebalance__{unique_name}")
    ids = {t.task_id for t in dag.tasks}
    for op in ("split", "counts"):  # one group per operator: its own collect, DS2 decision, plan, emit, await
        assert {f"{op}.collect", f"{op}.evaluate", f"{op}.place_and_plan", f"{op}.emit",
                f"{op}.await_checkpoints"} <= ids
        for task in ("collect", "evaluate", "place_and_plan"):
            fn = dag.get_task(f"{op}.{task}").python_callable
            assert inspect.signature(fn).parameters["op"].default == op
