"""spark_jobs.executors: on a cluster, W workers ask for ceil(W / task slots per executor)
executors, the surplus is killed before the new total is requested, an executor being killed is no
longer counted (its replacement is no surplus); local mode asks for
nothing; the capacity is --max-workers, else the standalone master's alive cores."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace
from typing import Any

import pytest

import spark_jobs.executors as X
from spark_jobs.executors import ExecutorScaler

pytestmark = pytest.mark.dataplane


class _JavaList(list):
    add = list.append


class FakeSpark:
    """The few SparkContext and JVM calls the scaler makes, recorded in `calls`."""

    def __init__(self, master: str, executors: list[str], conf: dict[str, str] | None = None,
                 parallelism: int = 2) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.executors = executors
        self.leaving: set[str] = set()  # killed, still registered until the driver has removed them
        backend = SimpleNamespace(isExecutorActive=lambda i: i in self.executors and i not in self.leaving)
        jsc = SimpleNamespace(getExecutorIds=self._ids, killExecutors=self._kill,
                              requestTotalExecutors=self._request, schedulerBackend=lambda: backend)
        utils = SimpleNamespace(toSeq=list, toScalaMap=dict)
        jvm = SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(spark=SimpleNamespace(
            api=SimpleNamespace(python=SimpleNamespace(PythonUtils=utils))))),
            java=SimpleNamespace(util=SimpleNamespace(ArrayList=_JavaList, HashMap=dict)))
        self.sparkContext = SimpleNamespace(master=master, defaultParallelism=parallelism, _jvm=jvm,
                                            _jsc=SimpleNamespace(sc=lambda: jsc),
                                            getConf=lambda: SimpleNamespace(get=(conf or {}).get))

    def _ids(self) -> Any:
        ids = list(self.executors)
        return SimpleNamespace(size=lambda: len(ids), apply=lambda i: ids[i])

    def _kill(self, ids: list[str]) -> None:
        self.calls.append(("kill", list(ids)))
        self.leaving |= set(ids)  # as Spark: a kill is asynchronous, the executor stays registered a while

    def removed(self, *ids: str) -> None:
        """The driver has processed these executors' loss: no longer registered."""
        self.executors = [e for e in self.executors if e not in ids]

    def _request(self, total: int, _locality: int, _hosts: dict) -> bool:
        self.calls.append(("request", total))
        return True


def test_local_mode_asks_for_nothing_and_its_capacity_is_its_cores():
    spark = FakeSpark("local[4]", [], parallelism=4)
    s = ExecutorScaler(spark)
    s.scale_to(8)
    assert not s.managed and spark.calls == [] and s.held() is None
    assert s.capacity() == 4 and ExecutorScaler(spark, max_workers=3).capacity() == 3


@pytest.mark.parametrize("cores, cpus, workers, want", [("1", "1", 5, 5), ("4", "1", 5, 2), ("4", "1", 8, 2),
                                                        ("4", "2", 5, 3), ("1", "2", 3, 3), ("2", "1", 0, 1)])
def test_executors_for_w_workers_by_task_slots(cores, cpus, workers, want):
    conf = {"spark.executor.cores": cores, "spark.task.cpus": cpus}
    assert ExecutorScaler(FakeSpark("spark://m:7077", [], conf)).executors_for(workers) == want


def test_fewer_workers_kill_the_surplus_before_requesting_the_new_total():
    spark = FakeSpark("spark://m:7077", ["10", "2", "1", "3"])
    s = ExecutorScaler(spark)
    assert s.executor_ids() == ["1", "2", "3", "10"], "numeric order: the newest go first"
    s.scale_to(2)
    assert spark.calls == [("kill", ["3", "10"]), ("request", 2)]
    assert s.held() == 2


def test_an_executor_on_its_way_out_is_not_counted_so_its_replacement_is_kept():
    spark = FakeSpark("spark://m:7077", ["1", "2", "3"])
    s = ExecutorScaler(spark)
    s.scale_to(1)
    assert spark.calls == [("kill", ["2", "3"]), ("request", 1)]
    spark.removed("1")  # the executor it kept is lost in the same epoch...
    spark.executors.append("4")  # ...and the cluster replaces it while 2 and 3 are still registered
    s.scale_to(1)
    assert spark.calls[2:] == [("request", 1)], "the replacement was killed as a surplus"
    assert s.executor_ids() == ["4"] and s.held() == 1


def test_more_workers_request_more_executors_and_kill_none():
    spark = FakeSpark("k8s://api:443", ["1"], {"spark.executor.cores": "2"})
    ExecutorScaler(spark).scale_to(5)
    assert spark.calls == [("request", 3)]


def _serve(monkeypatch, doc: Any, seen: list[str]) -> None:  # type: ignore[no-untyped-def]
    def urlopen(url: str, timeout: float):  # type: ignore[no-untyped-def]
        seen.append(url)
        if isinstance(doc, Exception):
            raise doc
        return io.BytesIO(json.dumps(doc).encode())

    monkeypatch.setattr(X.urllib.request, "urlopen", urlopen)


def test_a_standalone_clusters_capacity_is_its_alive_cores(monkeypatch):
    seen: list[str] = []
    _serve(monkeypatch, {"workers": [{"state": "ALIVE", "cores": 4}, {"state": "DEAD", "cores": 8},
                                     {"state": "ALIVE", "cores": 3}]}, seen)
    assert ExecutorScaler(FakeSpark("spark://m1:7077,m2:7077", [])).capacity() == 7
    assert ExecutorScaler(FakeSpark("spark://m:7077", [], {"spark.task.cpus": "2"}),
                          master_ui="http://ui:9090/").capacity() == 3
    assert seen == ["http://m1:8080/json/", "http://ui:9090/json/"]


@pytest.mark.parametrize("doc", [OSError("connection refused"), {"workers": []},
                                 {"workers": [{"state": "DEAD", "cores": 4}]}])
def test_an_unknown_capacity_is_none(monkeypatch, doc):
    _serve(monkeypatch, doc, [])
    assert ExecutorScaler(FakeSpark("spark://m:7077", [])).capacity() is None
    assert ExecutorScaler(FakeSpark("yarn", [])).capacity() is None, "no UI to ask"
