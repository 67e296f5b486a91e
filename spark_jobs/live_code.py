"""Live code upgrades on the driver: judge an upgrade step's code, ship it, and say which versions the tasks load.

A component of `spark_jobs.runner.JobRunner`. An upgrade step (docs/protocol.md, "Upgrade steps")
names a processor version (`ballast.code_version.CodeVersion`). Before the decision applies it,
`check` ships its files to every executor's Python workers (`SparkContext.addPyFile`: the tasks of
every later Spark job put them on their path, no restart) and imports it on the driver and on the
executors; a version that does not import, whose class says another version, that changes the
query's input or keys, or that declares no way to carry the state over is rejected whole, with
the reason in its checkpoint, and the job runs on with the version in force. Once applied, every
task loads the job's versions (`chain`) and carries a key's state over the first time the new
version handles it (spark_jobs.state_upgrade). On a restart `restore` ships the files again.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from ballast.code_version import CodeVersion
from ballast.operator_names import import_operator_class
from ballast.protocol import ControlStep
from spark_jobs.control_state import ControlState
from spark_jobs.processing import ProcessorOperator
from spark_jobs.processor import is_processor
from spark_jobs.state_upgrade import find_upgrade, version_of

log = logging.getLogger("ballast.runner")


class LiveCode:
    """The job's processor versions as the driver knows them: the command line's, then the upgrades'."""

    def __init__(self, spark: Any, op: Any, path: str) -> None:
        self.spark = spark
        self.op = op
        self.base: tuple[str, str] | None = (version_of(op.cls), path) if isinstance(op, ProcessorOperator) else None
        self._seen: dict[str, dict[int, dict[str, Any]]] = {}  # step key -> epoch -> tally not yet decided on

    def history(self, st: ControlState | None) -> list[tuple[str, str]]:
        """(version, ref) of every version that was in force, the command line's first."""
        assert self.base is not None
        return [self.base, *((c.version, c.ref) for c in (st.code if st is not None else []))]

    def chain(self, st: ControlState) -> tuple[tuple[str, str], ...]:
        """What a task loads (spark_jobs.worker.ApplyConfig.code): empty until an upgrade applied."""
        return tuple(self.history(st)) if st.code and self.base is not None else ()

    def shadow_chain(self, st: ControlState, shadow: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
        """What a task loads to try a shadow upgrade (`EpochControl.shadow`): the versions with it last."""
        if not shadow or self.base is None:
            return ()
        code = CodeVersion.from_dict(shadow["code"])
        return (*self.history(st), (code.version, code.ref))

    def observe(self, shadow: dict[str, Any] | None, docs: list[dict[str, Any]], epoch: int = 0) -> None:
        """Add the tasks' shadow tallies of an epoch to what the next decision takes (`take_seen`)."""
        if not shadow:
            return
        tally: dict[str, Any] = {"calls": 0, "differ": 0, "errors": 0, "example": ""}
        for d in docs:
            t = d.get("shadow") or {}
            for k in ("calls", "differ", "errors"):
                tally[k] += int(t.get(k, 0))
            tally["example"] = tally["example"] or t.get("example", "")
        self._seen.setdefault(shadow["step"], {})[epoch] = tally  # an epoch run again replaces its tally

    def take_seen(self) -> dict[str, dict[str, Any]]:
        """The shadow tallies since the last decision (spark_jobs.control.decide's `shadow_seen`), once:
        per step, the sum over its epochs, and how many of those compared a call."""
        seen, self._seen = self._seen, {}
        out = {}
        for step, by_epoch in seen.items():
            ts = list(by_epoch.values())
            out[step] = {**{k: sum(t[k] for t in ts) for k in ("calls", "differ", "errors")},
                         "epochs": sum(1 for t in ts if t["calls"]),
                         "example": next((t["example"] for t in ts if t["example"]), "")}
        return out

    def restore(self, st: ControlState | None) -> None:
        """A restarted driver: ship every version's files again and check the version in force imports
        here (a task that cannot import it would fail every epoch; this says what is missing first)."""
        if st is None or not st.code:
            return
        for c in st.code:
            self._ship(c)
        c = st.code[-1]
        try:
            import_operator_class(c.ref)
        except ValueError as exc:
            raise RuntimeError(f"the job's processor in force is {c.describe()}, put there by an upgrade step, and "
                               f"it does not import: {exc}. Restore its py_files {list(c.py_files)}, or roll back "
                               "with a ballast_upgrade run to an earlier version once it runs") from None
        log.info("processor in force: %s (upgrades: %s)", c.describe(),
                 " -> ".join(v for v, _ in self.history(st)))

    def check(self, step: ControlStep, st: ControlState) -> str | None:
        """Why `step`'s code cannot go into force now (None: it can). Ships its files and imports it
        on the driver and the executors."""
        code = step.code
        if code is None:
            return "an upgrade step names the code it deploys (field 'code')"
        if self.base is None:
            return f"only a stateful processor upgrades live; this job runs {type(self.op).__name__}"
        history = self.history(st)
        now_version, now_ref = history[-1]
        if code.version == now_version:
            return f"version {code.version} is already in force ({now_ref})"
        for v, ref in history:
            if v == code.version and ref != code.ref:
                return (f"version {v} was {ref} in this job; a version label names one class for the life of a job "
                        f"(give {code.ref} a label of its own)")
        try:
            self._ship(code)
        except (OSError, ValueError) as exc:
            return f"could not ship {code.describe()}'s py_files: {exc}"
        try:
            cls, now_cls = import_operator_class(code.ref), import_operator_class(now_ref)
        except ValueError as exc:
            return f"{code.describe()} does not import on the driver: {exc}"
        why = judge_class(cls, code, self.op.spec)
        if why:
            return why
        assert isinstance(now_cls, type) and isinstance(cls, type)
        if find_upgrade(now_cls, cls, now_version, code.version) is None:
            return (f"neither version declares StateUpgrade({now_version!r}, {code.version!r}) in ballast_upgrades: "
                    "say how the state carries over (an empty StateUpgrade when it does as it is)")
        return self._probe_executors(code, max(st.workers, 1))

    def _ship(self, code: CodeVersion) -> None:
        """Ship `code`'s files to the executors' Python workers (a path added twice is ignored by Spark)."""
        sc = self.spark.sparkContext
        for f in code.py_files:
            if "://" not in f and not os.path.isfile(f):
                raise ValueError(f"py_file {f} is not a file on the driver")
            sc.addPyFile(f)
            if "://" not in f and f.lower().endswith(".py"):  # Spark puts a .py on the tasks' path, not the driver's
                d = os.path.dirname(os.path.abspath(f))
                if d not in sys.path:
                    sys.path.insert(1, d)
        importlib.invalidate_caches()

    def _probe_executors(self, code: CodeVersion, tasks: int) -> str | None:
        """Import `code` in `tasks` Python tasks on the executors; the first failure is the reason."""
        ref, version = code.ref, code.version

        def probe(_: Any) -> Any:
            import importlib as il
            import os as o
            import socket

            from ballast.operator_names import import_operator_class as imp
            from spark_jobs.state_upgrade import version_of as ver

            il.invalidate_caches()
            where = f"{socket.gethostname()}:{o.getpid()}"
            try:
                got = ver(imp(ref))  # type: ignore[arg-type]
                yield (where, None if got == version else f"its class says ballast_version {got!r}")
            except Exception as exc:
                yield (where, f"{type(exc).__name__}: {exc}")

        try:
            found = self.spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(probe).collect()
        except Exception as exc:
            return f"the executors' import check of {code.describe()} failed: {type(exc).__name__}: {str(exc)[:300]}"
        bad = [(w, e) for w, e in found if e]
        if bad:
            return f"{code.describe()} does not import on executor {bad[0][0]}: {bad[0][1]}"
        log.info("%s imports on the driver and on %d executor task(s)", code.describe(), len(found))
        return None


def judge_class(cls: Any, code: CodeVersion, spec: Any) -> str | None:
    """What is wrong with `cls` as `code`'s class for a job whose query is `spec` (None: nothing)."""
    if not (isinstance(cls, type) and is_processor(cls)):
        return f"{code.ref} is not a stateful processor (a class with init(handle) and handle_input_rows)"
    if version_of(cls) != code.version:
        return (f"{code.ref} says ballast_version {version_of(cls)!r}, the step deploys version {code.version!r}: "
                "is it the wrong build?")
    theirs = ProcessorOperator(cls).spec
    if theirs != spec:
        return (f"{code.ref} changes the query's input or keys (ballast_query {theirs!r:.200} against {spec!r:.200}); "
                "a live upgrade keeps them: start a new job for another query")
    return None
