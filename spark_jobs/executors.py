"""W drives executors: more workers ask the cluster for more executors, fewer give them back.

Why not dynamic allocation: its target follows the number of pending *tasks* of every stage (the
Kafka read stage has one per topic partition), and it releases executors after an idle timeout,
so it would neither follow W nor keep a warm cache. Ballast knows W, so it asks for exactly
ceil(W / cores per executor) executors (`SparkContext.requestTotalExecutors`, the developer API
dynamic allocation itself uses) and kills the surplus when W falls (`killExecutors`). A killed
executor only loses caches: the state is durable (spark_jobs.durable).

Capacity (the most workers the cluster can run) is `--max-workers` when given, otherwise, on a
standalone cluster, the cores of its alive workers from the master's JSON API. The job reports it
in its heartbeat; the controller caps its upper bound with it.
"""

from __future__ import annotations

import json
import logging
import math
import urllib.request
from typing import Any

log = logging.getLogger("ballast.executors")


class ExecutorScaler:
    def __init__(self, spark: Any, max_workers: int | None = None, master_ui: str | None = None) -> None:
        self.sc = spark.sparkContext
        self.master = str(self.sc.master)
        self.managed = self.master.startswith(("spark://", "yarn", "k8s://"))
        conf = self.sc.getConf()
        self.cores = int(conf.get("spark.executor.cores", "1"))
        self.task_cpus = int(conf.get("spark.task.cpus", "1"))
        self.max_workers = max_workers
        self.master_ui = master_ui or conf.get("spark.ballast.masterUi", None)
        self._target: int | None = None

    def _jvm_sc(self) -> Any:
        return self.sc._jsc.sc()

    def executor_ids(self) -> list[str]:
        """Executors registered with the driver now and not on their way out (the driver itself
        excluded). An executor being killed, or whose loss the driver awaits the reason of, is still
        registered for a while: counted, it looked like a surplus beside its replacement, and the
        replacement was killed in turn, epoch after epoch (the cluster test saw a new executor
        every ~4 s for minutes after a lost one)."""
        sc = self._jvm_sc()
        seq = sc.getExecutorIds()
        ids = [str(seq.apply(i)) for i in range(seq.size())]
        backend = sc.schedulerBackend()  # a CoarseGrainedSchedulerBackend on every managed cluster
        return sorted((i for i in ids if backend.isExecutorActive(i)), key=lambda s: (len(s), s))

    def executors_for(self, workers: int) -> int:
        slots = max(1, self.cores // self.task_cpus)
        return max(1, math.ceil(workers / slots))

    def scale_to(self, workers: int) -> None:
        """Ask for the executors W workers need; give back the surplus. Local mode: nothing to do."""
        if not self.managed:
            return
        target = self.executors_for(workers)
        jvm = self.sc._jvm
        utils = jvm.org.apache.spark.api.python.PythonUtils
        sc = self._jvm_sc()
        ids = self.executor_ids()
        surplus = ids[target:] if len(ids) > target else []
        if surplus:
            # killExecutors lowers the requested total by one per executor it kills (to 0 at most),
            # so it goes first: the request below leaves the cluster's limit at the target. Killed
            # after it, the limit stayed below the target until the next epoch, and an epoch that
            # lost the executors it kept waited for ever (standalone launched no replacement).
            jl = jvm.java.util.ArrayList()
            for i in surplus:
                jl.add(i)
            sc.killExecutors(utils.toSeq(jl))
        ok = sc.requestTotalExecutors(target, 0, utils.toScalaMap(jvm.java.util.HashMap()))
        if target != self._target or surplus:
            log.info("workers %d -> executors %d (had %d%s)%s", workers, target, len(ids),
                     f", released {surplus}" if surplus else "", "" if ok else " (the cluster manager refused)")
        self._target = target

    def capacity(self) -> int | None:
        """The most workers the cluster can run, or None when unknown (local mode: the cores)."""
        if self.max_workers:
            return self.max_workers
        if not self.managed:
            return int(self.sc.defaultParallelism)
        ui = self.master_ui
        if ui is None and self.master.startswith("spark://"):
            host = self.master[len("spark://"):].split(",")[0].rsplit(":", 1)[0]
            ui = f"http://{host}:8080"
        if ui is None:
            return None
        try:
            with urllib.request.urlopen(ui.rstrip("/") + "/json/", timeout=2) as r:
                doc = json.load(r)
        except (OSError, ValueError):
            return None
        cores = sum(int(w.get("cores", 0)) for w in doc.get("workers", []) if w.get("state") == "ALIVE")
        return cores // self.task_cpus if cores else None

    def held(self) -> int | None:
        return len(self.executor_ids()) if self.managed else None
