"""Live code upgrades on the driver: judge an upgrade step's code, ship it, and say which versions the tasks load.

A component of `spark_jobs.runner.JobRunner`. An upgrade step (docs/protocol.md, "Upgrade steps")
names a processor version (`ballast.code_version.CodeVersion`). Before the decision applies it,
`check` ships its files to every executor's Python workers (`SparkContext.addPyFile`: the tasks of
every later Spark job put them on their path, no restart) and imports it on the driver (in a
thread beside the epochs), then in every task of the next epoch; a version that does not import,
whose class says another version, that changes the query's input or keys, or that declares no way
to carry the state over is rejected whole, with the reason in its checkpoint, and the job runs on
with the version in force. Once applied, every task loads the job's versions (`chain`) and carries
a key's state over the first time the new version handles it (spark_jobs.state_upgrade). On a
restart `restore` ships the files again.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from ballast.code_version import CodeVersion
from ballast.operator_names import import_operator_class
from ballast.protocol import ControlStep
from spark_jobs.control import CODE_CHECK_PENDING
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
        self._lock = threading.Lock()
        self._answers: dict[tuple[Any, ...], str | None] = {}  # a code check's answer (`check`)
        self._checking: set[tuple[Any, ...]] = set()
        self._probe: tuple[tuple[Any, ...], tuple[tuple[str, str], ...]] | None = None  # (check key, versions)

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
        """An epoch's tasks reported: their answer to an upgrade's probe, and their shadow tallies, added
        to what the next decision takes (`take_seen`)."""
        self._observe_probe(docs)
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
        """Why `step`'s code cannot go into force now (None: it can; CODE_CHECK_PENDING: not known yet).

        What the step and the job's history say is answered at once. Shipping the files and judging
        the version on the driver run in a thread beside the epochs, started by the first call; then
        the next epoch's tasks import it where they run (`probe_chain`: every worker slot, in the
        Python workers that will run it, at the cost of an import) and report it in their metrics
        (`observe`). Until both have answered the decision keeps the step queued, so the epoch that
        applies it pays nothing for the check. (A Spark job of its own to import it on the executors
        ran beside the epoch and competed with its tasks for the cores: it stretched that epoch 2-3x
        on 2 local cores.)"""
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
        # per step: a new plan with the same code is checked again (its files may have been fixed meanwhile)
        key = (step.plan_id, step.step, json.dumps(code.entry.to_dict(), sort_keys=True), now_version, now_ref)
        with self._lock:
            if key in self._answers:
                return self._answers[key]
            if key not in self._checking:
                self._checking.add(key)
                threading.Thread(target=self._answer, args=(key, code, tuple(history)),
                                 name="ballast-code-check", daemon=True).start()
        return CODE_CHECK_PENDING

    @property
    def probing(self) -> bool:
        """An upgrade's code waits for the executors' half of its check: the next epoch runs tasks."""
        return self._probe is not None

    def probe_chain(self) -> tuple[tuple[str, str], ...]:
        """What every task of the next epoch imports to check an upgrade (spark_jobs.worker.ApplyConfig.probe)."""
        probe = self._probe
        return probe[1] if probe is not None else ()

    def _observe_probe(self, docs: list[dict[str, Any]]) -> None:
        """The tasks' answers to the probe: the first that could not import it is the step's reason."""
        with self._lock:
            if self._probe is None:
                return
            key, chain = self._probe
            got = [d for d in docs if "probe" in d]
            if not got:
                return
            bad = next((d for d in got if d["probe"]), None)
            code = f"version {chain[-1][0]} ({chain[-1][1]})"
            where = f"{bad.get('host')}:{bad.get('pid')}" if bad is not None else ""
            self._answers[key] = None if bad is None else f"{code} does not import on executor {where}: {bad['probe']}"
            self._checking.discard(key)
            self._probe = None
        log.info("%s: the executors' check in %d task(s): %s", code, len(got), self._answers[key] or "it imports")

    def _answer(self, key: tuple[Any, ...], code: CodeVersion, history: tuple[tuple[str, str], ...]) -> None:
        """The driver's half of a check (in a thread); a yes hands the executors' half to the next epoch."""
        now_version, now_ref = history[-1]
        t0 = time.perf_counter()
        try:
            why = self._judge(code, now_version, now_ref)
        except Exception as exc:  # noqa: BLE001 - whatever the check raises is the step's answer, never the job's
            why = f"checking {code.describe()} failed: {type(exc).__name__}: {str(exc)[:300]}"
        log.info("upgrade to %s checked in %.0f ms: %s", code.describe(), (time.perf_counter() - t0) * 1000,
                 why or "it can go into force")
        with self._lock:
            if why is None:  # the driver's half said yes: the executors' half in the next epoch's tasks
                self._probe = (key, (*history, (code.version, code.ref)))
            else:
                self._answers[key] = why
                self._checking.discard(key)

    def _judge(self, code: CodeVersion, now_version: str, now_ref: str) -> str | None:
        """Ship `code`, import it on the driver, judge its class and its StateUpgrade."""
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
        return None

    def _ship(self, code: CodeVersion) -> None:
        """Ship `code`'s files to the executors' Python workers (a path added twice is ignored by Spark)."""
        if not code.py_files:
            return
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
