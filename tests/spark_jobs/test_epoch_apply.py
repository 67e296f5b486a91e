"""spark_jobs.epoch_apply without Spark: how many tasks an epoch runs (W, or more while a pre-copy
warms a worker the map does not have yet), which queries write their outputs in Kafka
transactions, a stateless epoch's metrics spread over the workers, and a run before the state is
bound refused. The Spark job itself: tests/system (every job test runs it)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from spark_jobs.control_state import initial_state
from spark_jobs.epoch_apply import EpochApply, EpochWork, stateless_docs
from spark_jobs.epoch_times import EpochTimes
from spark_jobs.fencing import DriverFence
from spark_jobs.job_clients import JobClients
from spark_jobs.journal import Journal
from spark_jobs.nexmark.stateless import Q1
from spark_jobs.operator_loader import get_operator
from spark_jobs.run_config import RunConfig
from spark_jobs.stateless import StatelessOperator

pytestmark = pytest.mark.dataplane


def _apply(op: object, mode: str = "transactional") -> EpochApply:
    cfg = RunConfig(job="j", input_topic="in", checkpoint_dir="/c", bootstrap="-", db_url="sqlite://", bins=8,
                    output_mode=mode)
    stop = threading.Event()
    clients = JobClients(cfg, Journal("/c"), ["in"], stop)
    return EpochApply(cfg, op, None, clients, DriverFence(cfg, clients, stop), None)


def test_an_epoch_runs_a_task_per_worker_and_one_more_per_worker_a_pre_copy_warms():
    st = initial_state(8, 2)
    assert EpochWork(epoch=3, state=st).tasks == 2
    assert EpochWork(epoch=3, state=st, warm={3: (1, 2)}).tasks == 4, "worker 3 warms before the map has it"
    assert EpochWork(epoch=3, state=st, warm={1: (5,)}, moving_in={0: (1,)}).tasks == 2


def test_keyed_queries_write_in_transactions_unless_at_least_once_and_stateless_ones_never():
    keyed = get_operator("keycount")
    assert _apply(keyed).transactional
    assert not _apply(keyed, "at-least-once").transactional
    assert not _apply(StatelessOperator(Q1)).transactional, "Spark's Kafka sink writes a stateless query's outputs"
    assert _apply(keyed, "at-least-once").txn_target(2) is None


def test_a_stateless_epochs_rows_and_time_are_spread_evenly_over_the_workers():
    docs = stateless_docs(7, 3, 90.0)
    assert [d["records_in"] for d in docs] == [3, 2, 2] and sum(d["records_in"] for d in docs) == 7
    assert {d["useful_ms"] for d in docs} == {30.0} and {d["wall_ms"] for d in docs} == {90.0}
    assert all(d["bins"] == {} and d["state_keys"] == 0 and d["records_out"] == 0 for d in docs)


def test_a_run_before_the_start_bound_the_state_is_refused():
    with pytest.raises(AssertionError, match="before the runner's start bound the state"):
        _apply(get_operator("keycount")).run(SimpleNamespace(), EpochWork(epoch=0, state=initial_state(8, 2)),
                                             EpochTimes())
