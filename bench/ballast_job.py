"""Driving a Ballast job from the benchmark: start it (the data plane's own CLI, in a child process),
read its metrics DB, emit migration plans on its control topic, and turn what it did into
per-record latencies.

Latency (what is measured, exactly): the key-count output does not carry the scheduled time of
the inputs it answers, so latency is computed per input record from two logs the job keeps anyway:
* the Spark offset log (`<checkpoint>/spark/offsets/<epoch>`) gives each epoch's input offset
  range per partition, and the load generator's deterministic placement gives every offset's
  scheduled time (bench.loadgen.Schedule);
* the output topic gives each epoch's answer time: the largest Kafka timestamp (CreateTime, set
  by Spark's producer when the epoch's outputs are written) among the epoch's outputs, deduplicated
  by their `ballast-id` header (a replayed epoch keeps the first copy).
latency(record) = answer time of its epoch − its scheduled time. Every input record is answered in
the epoch that reads it (key-count emits one output per key per epoch), so this is the record's
true response time, bounded above by the epoch's last output (a few ms of skew at most).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from ballast.policy import MigrationStep
from ballast.store import CheckpointRow, EpochRow, JobStore, WorkerRow
from bench.infra import PY, Proc, unix, wait_until
from bench.loadgen import Schedule
from spark_jobs.offsets import read_offset_file

OPERATOR = "keycount"


@dataclass
class JobSpec:
    job: str
    input_topic: str
    bins: int
    workers: int
    db_url: str
    bootstrap: str
    run_dir: Path
    trigger_ms: int = 500
    max_offsets_per_trigger: int | None = None
    operator: str = OPERATOR
    log_level: str = "INFO"  # DEBUG adds the runner's per-epoch phase line
    # a chain: the `--operator NAME=PATH` values; `operator` then names the one that is migrated
    operators: tuple[str, ...] = ()
    operator_path: str | None = None  # a user's operator (`package.module:Class`), run as `operator`
    env: dict[str, str] = field(default_factory=dict)  # extra environment of the job's process
    extra_args: tuple[str, ...] = ()  # extra `spark_jobs.cli run` arguments (e.g. --snapshot-every)

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "ckpt" / self.job

    @property
    def operator_checkpoint_dir(self) -> Path:
        """Where `operator`'s Spark checkpoint (offset log) lives: a chain gives each operator its own."""
        return self.checkpoint_dir / self.operator if self.operators else self.checkpoint_dir


class BallastJob:
    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.proc: Proc | None = None
        self._emitter: Any = None

    # ------------------------------------------------------------------------- lifecycle
    def start(self) -> BallastJob:
        s = self.spec
        one = f"{s.operator}={s.operator_path}" if s.operator_path else s.operator
        ops = [a for op in (s.operators or (one,)) for a in ("--operator", op)]
        args = [PY, "-m", "spark_jobs.cli", "run", "--job", s.job, *ops,
                "--input-topic", s.input_topic, "--bins", str(s.bins), "--workers", str(s.workers),
                "--checkpoint-dir", str(s.checkpoint_dir), "--bootstrap", s.bootstrap, "--db-url", s.db_url,
                "--trigger-ms", str(s.trigger_ms)]
        if s.max_offsets_per_trigger:
            args += ["--max-offsets-per-trigger", str(s.max_offsets_per_trigger)]
        self.proc = Proc([*args, *s.extra_args], s.run_dir / "logs" / f"{s.job}.log", f"ballast job {s.job}",
                         extra_env={"BALLAST_LOG_LEVEL": s.log_level, **s.env}).start()
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=180)
        if self._emitter is not None:
            self._emitter.close()
            self._emitter = None

    # ------------------------------------------------------------------------- metrics DB
    @property
    def store(self) -> JobStore:
        """The metrics store bound to this job (every read below goes through it)."""
        return JobStore(self.spec.db_url, self.spec.job, self.spec.operator)

    def epochs(self, since: int = -1) -> list[EpochRow]:
        return self.store.epoch_metrics(since + 1)

    def worker_rows(self, epochs: list[int]) -> list[WorkerRow]:
        return self.store.worker_window(epochs)

    def bin_stats(self, last_epochs: int = 20) -> tuple[list[float], list[int]]:
        """Per-bin records (load) over the last epochs and the latest known state bytes per bin."""
        st = self.store.bin_stats(self.spec.bins, last_epochs)
        return list(st.load), list(st.bytes)

    def last_epoch(self) -> int:
        rows = self.epochs_tail(1)
        return rows[-1].epoch if rows else -1

    def epochs_tail(self, n: int) -> list[EpochRow]:
        return self.store.epoch_window(n)

    def current_map(self) -> tuple[int, int, list[int]]:
        snap = self.store.latest_map()
        if snap is None:
            raise RuntimeError(f"job {self.spec.job} has no routing map yet")
        return snap.map_version, snap.workers, list(snap.assignment)

    def snapshot(self, eps: list[EpochRow], version: int, workers: int, assignment: list[int],
                 **settings: int | None) -> Any:
        """The controller's view of the job over the epochs `eps` (a `ballast.control.handoffs.Snapshot`,
        what the rebalance run's collect stage builds from the metrics DB), for experiments that call
        its evaluator themselves; `settings`: trigger_ms / max_records_per_epoch in force."""
        from ballast.control.handoffs import BinLoad, EpochSample, MapState, Snapshot, WorkerSample

        wk = self.worker_rows([e.epoch for e in eps])
        load, size = self.bin_stats(len(eps))
        return Snapshot(
            map=MapState(version, eps[0].epoch, workers, tuple(assignment)),
            bins=BinLoad(tuple(load), tuple(size), (0,) * len(size), len(eps)),
            epochs=tuple(EpochSample(e.epoch, e.input_rows, e.batch_ms, e.input_rate or 0.0, e.backlog or 0)
                         for e in eps),
            workers=tuple(WorkerSample(w.epoch, w.worker, w.records_in, w.records_out, w.useful_ms, w.wall_ms)
                          for w in wk),
            latest_epoch=eps[-1].epoch, **settings)

    def checkpoints(self, plan_id: str) -> list[CheckpointRow]:
        by_step = self.store.checkpoints(plan_id)
        return [by_step[k] for k in sorted(by_step)]

    def wait_epochs(self, n: int, timeout: float) -> int:
        """Wait until `n` more epochs have committed; returns the last epoch."""
        start = self.last_epoch()
        wait_until(lambda: self.last_epoch() >= start + n, timeout, f"{n} epochs of {self.spec.job}", proc=self.proc)
        return self.last_epoch()

    def wait_caught_up(self, total_rows: int, timeout: float) -> None:
        """Wait until the job has read `total_rows` input rows in all (e.g. a prefill)."""
        def done() -> bool:
            rows = self.epochs()
            return sum(r.input_rows for r in rows) >= total_rows
        wait_until(done, timeout, f"{self.spec.job} to read {total_rows} rows", poll=1.0, proc=self.proc)

    # ------------------------------------------------------------------------- control
    def emit(self, steps: list[MigrationStep], plan_id: str, gap_s: float = 0.0, reason: str = "bench", *,
             precopy: bool = False, handover: bool = False, total: int | None = None) -> float:
        """Send steps of a plan at once (every step unless `total`, the plan's step count, says the
        plan has more); step i is effective at now + (i-1)·gap. Returns the send time."""
        from ballast.emitter import ControlEmitter
        from ballast.protocol import ControlStep

        if self._emitter is None:  # the control plane's emitter: one way to put a step on the topic
            self._emitter = ControlEmitter(self.spec.bootstrap, self.spec.db_url)
        now = datetime.now(UTC)
        for st in steps:
            self._emitter.send(ControlStep(
                job=self.spec.job, operator=self.spec.operator, plan_id=plan_id, step=st.step,
                steps=total or len(steps), kind=st.kind, moves=tuple(st.moves), workers=st.workers,
                map_version=st.map_version, issued_at=now, effective_at=now + timedelta(seconds=(st.step - 1) * gap_s),
                reason=reason, precopy=precopy, handover=handover and bool(st.moves), bins=st.split_to,
                settings=st.settings))
        return now.timestamp()

    def wait_plan(self, plan_id: str, steps: int, timeout: float) -> list[Any]:
        def done() -> list[Any] | None:
            cps = self.checkpoints(plan_id)
            bad = [c for c in cps if c.status != "applied"]
            if bad:
                raise RuntimeError(f"plan {plan_id}: step {bad[0].step} {bad[0].status}: {bad[0].reason}")
            return cps if len(cps) >= steps else None
        return wait_until(done, timeout, f"plan {plan_id} ({steps} steps)", poll=0.2, proc=self.proc)

    def migrate(self, target: list[int], strategy: str, *, batch_bins: int | None = None, gap_s: float = 0.0,
                timeout: float = 1800.0, max_steps: int | None = None) -> dict[str, Any]:
        """Plan (ballast.policy) and run one migration to `target`; returns its timing and checkpoints.

        `batched-precopy`: the batched steps with `precopy: true`, each sent once the one before it
        has applied. (Sent together, every queued pre-copy step's bins would warm in the first epoch:
        the whole move at once, see spark_jobs.control.warm_plan.) Each step then warms its bins for
        one epoch at least and cuts over with only the changes since. `handover`: the all-at-once
        step with `handover: true` (a windowed operator: nothing moves; it applies once the old
        owners' last windows closed, docs/handover.md)."""
        version, workers, current = self.current_map()
        target_workers = max(target) + 1 if max(target) + 1 > workers else workers
        load, size = self.bin_stats()
        precopy = strategy == "batched-precopy"
        handover = strategy == "handover"
        steps = make_steps(current, version, target, workers, target_workers, size, load,
                           "batched" if precopy else "all-at-once" if handover else strategy, batch_bins)
        truncated = None
        if max_steps is not None and len(steps) > max_steps:
            truncated = len(steps)
            steps = steps[:max_steps]
        plan_id = f"bench-{strategy}-{uuid.uuid4().hex[:8]}"
        if precopy:
            t_emit = 0.0
            for i, st in enumerate(steps):
                t = self.emit([st], plan_id, reason=f"bench {strategy}", precopy=True, total=len(steps))
                t_emit = t_emit or t
                cps = self.wait_plan(plan_id, i + 1, timeout)
        else:
            t_emit = self.emit(steps, plan_id, gap_s=gap_s, reason=f"bench {strategy}", handover=handover)
            cps = self.wait_plan(plan_id, len(steps), timeout)
        t_end = max(unix(c.completed_at) for c in cps)
        t_first = min(unix(c.applied_at) for c in cps)
        return {
            "plan_id": plan_id, "strategy": strategy, "steps": len(steps), "steps_planned": truncated or len(steps),
            "bins": sum(len(s.moves) for s in steps), "t_emit": t_emit, "t_first_applied": t_first, "t_end": t_end,
            "duration_s": t_end - t_emit, "keys_moved": sum(c.keys_moved for c in cps),
            "bytes_moved": sum(c.bytes_moved for c in cps), "move_ms_total": sum(c.migration_ms for c in cps),
            # the moved bins' state as the last bin metrics gave it (bytes_moved counts what the receivers
            # replayed: every change since the last snapshot, superseded values included)
            "state_bytes_moved": sum(size[m.bin] for st in steps for m in st.moves),
            "move_ms_max_step": max(c.migration_ms for c in cps), "gap_s": gap_s, "precopy": precopy,
            "step_ms": [c.migration_ms for c in cps], "step_bytes": [c.bytes_moved for c in cps],
            "epochs": [c.applied_epoch for c in cps],
        }


    def upgrade(self, label: str, code: Any, timeout: float = 1800.0) -> dict[str, Any]:
        """One upgrade step to `code` (a ballast.code_version.CodeVersion, shadow or not), sent by the control
        plane's emitter and awaited to its checkpoint; the same record as `migrate`'s (nothing moves)."""
        from ballast.emitter import ControlEmitter
        from ballast.protocol import ControlStep

        version, workers, _ = self.current_map()
        if self._emitter is None:
            self._emitter = ControlEmitter(self.spec.bootstrap, self.spec.db_url)
        plan_id = f"bench-{label}-{uuid.uuid4().hex[:8]}"
        now = datetime.now(UTC)
        self._emitter.send(ControlStep(job=self.spec.job, operator=self.spec.operator, plan_id=plan_id, step=1,
                                       steps=1, kind="upgrade", moves=(), workers=workers, map_version=version,
                                       issued_at=now, effective_at=now, reason=f"bench {label}", code=code))
        [cp] = self.wait_plan(plan_id, 1, timeout)
        t_emit, t_end = now.timestamp(), unix(cp.completed_at)
        return {"plan_id": plan_id, "strategy": label, "steps": 1, "steps_planned": 1, "bins": 0, "t_emit": t_emit,
                "t_first_applied": unix(cp.applied_at), "t_end": t_end, "duration_s": t_end - t_emit,
                "keys_moved": 0, "bytes_moved": cp.bytes_moved, "move_ms_total": cp.migration_ms,
                "state_bytes_moved": 0, "move_ms_max_step": cp.migration_ms, "gap_s": 0.0, "precopy": False,
                "step_ms": [cp.migration_ms], "step_bytes": [cp.bytes_moved], "epochs": [cp.applied_epoch],
                "reason": cp.reason}


def make_steps(current: list[int], version: int, target: list[int], workers: int, target_workers: int,
               size: list[int], load: list[float], strategy: str, batch_bins: int | None) -> list[Any]:
    """Migration steps from the policy planner.

    `all-at-once` and `fluid` are the planner's. `batched` is Megaphone's general batched
    strategy ("batches of changed bins with a common time, one batch after the other"): the
    planner's fluid order cut into steps of `batch_bins` bins. (The planner's own `batched` is the
    matching variant — each worker sends and receives at most one bin per step — which at W=2 with
    one-directional moves is one bin per step, i.e. fluid; it is used when batch_bins is None.)
    """
    from ballast.policy import MigrationStep, plan_migration

    if strategy in ("batched", "batched-gap") and batch_bins:
        fluid = plan_migration(current, version, target, workers, target_workers, size, load, strategy="fluid")
        moves = [m for s in fluid.steps for m in s.moves]
        groups = [moves[i:i + batch_bins] for i in range(0, len(moves), batch_bins)]
        # the planner's worker-count rule: growing, the new W from the first step (new workers start
        # empty); shrinking, the old W until the last step has drained the retired workers
        def w_at(i: int) -> int:
            return target_workers if target_workers >= workers or i == len(groups) - 1 else workers

        return [MigrationStep(step=i + 1, moves=tuple(g), workers=w_at(i), map_version=version + i,
                         bytes=sum(size[m.bin] for m in g)) for i, g in enumerate(groups)]
    planner = {"batched-gap": "batched"}.get(strategy, strategy)
    plan = plan_migration(current, version, target, workers, target_workers, size, load, strategy=planner)  # type: ignore[arg-type]
    return list(plan.steps)


def half_of_half(assignment: list[int], workers: int) -> list[int]:
    """Megaphone §5.3's target: half the bins of half the workers move (to the other half, round robin)."""
    target = list(assignment)
    movers = list(range(workers // 2)) if workers > 1 else []
    others = [w for w in range(workers) if w not in movers]
    j = 0
    for w in movers:
        owned = [b for b, x in enumerate(assignment) if x == w]
        for b in owned[::2]:  # every other bin: half of them, spread over the key space
            target[b] = others[j % len(others)]
            j += 1
    return target


# ----------------------------------------------------------------------------- latency


def _read_offset_file(path: Path, topic: str) -> dict[int, int] | None:
    doc = read_offset_file(path)
    if not doc or topic not in doc:
        return None
    return {int(k): int(v) for k, v in doc[topic].items()}


def offset_ranges(checkpoint_dir: Path, topic: str, known_ends: dict[int, dict[int, int]] | None = None
                  ) -> dict[int, dict[int, tuple[int, int]]]:
    """{epoch: {partition: (start, end)}} for `topic` from the Spark offset log.

    Spark keeps only the last `minBatchesToRetain` (100) offset files, so the run tails them while the
    job runs (`OffsetLogTail`) and passes what it saw as `known_ends`. An epoch whose predecessor is
    unknown is skipped (its start is unknown), except epoch 0, which starts at the topic's beginning.
    """
    d = Path(checkpoint_dir) / "spark" / "offsets"
    ends: dict[int, dict[int, int]] = dict(known_ends or {})
    for p in d.iterdir() if d.exists() else []:
        if p.name.isdigit() and int(p.name) not in ends:
            doc = _read_offset_file(p, topic)
            if doc is not None:
                ends[int(p.name)] = doc
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for e in sorted(ends):
        if e == 0:
            prev: dict[int, int] | None = {}
        else:
            prev = ends.get(e - 1)
        if prev is None:
            continue
        out[e] = {p: (prev.get(p, 0), end) for p, end in ends[e].items()}
    return out


class OffsetLogTail:
    """Copies each epoch's end offsets out of the Spark offset log while the job runs (Spark deletes
    all but the last 100 files)."""

    def __init__(self, checkpoint_dir: Path, topic: str, interval_s: float = 0.5) -> None:
        import threading

        self.dir = Path(checkpoint_dir) / "spark" / "offsets"
        self.topic, self.interval = topic, interval_s
        self.ends: dict[int, dict[int, int]] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="offset-tail", daemon=True)

    def _scan(self) -> None:
        if not self.dir.exists():
            return
        for p in self.dir.iterdir():
            if p.name.isdigit() and int(p.name) not in self.ends:
                doc = _read_offset_file(p, self.topic)
                if doc is not None:
                    self.ends[int(p.name)] = doc

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._scan()
            self._stop.wait(self.interval)

    def start(self) -> OffsetLogTail:
        self._t.start()
        return self

    def stop(self) -> dict[int, dict[int, int]]:
        self._stop.set()
        self._t.join(timeout=5)
        self._scan()
        return self.ends


def output_times(bootstrap: str, topic: str, from_ms: int, timeout_s: float = 300.0) -> dict[int, float]:
    """{epoch: answer time (unix s)} = max Kafka timestamp of the epoch's outputs (deduplicated by id)."""
    from spark_jobs.output import record_id, scan_topic

    seen: set[bytes] = set()
    best: dict[int, float] = {}
    for msg in scan_topic(bootstrap, topic, timeout_s, from_ms=from_ms, max_poll_records=20000,
                          fetch_max_bytes=64 * 2**20, max_partition_fetch_bytes=16 * 2**20):
        rid = record_id(msg)
        if rid is None or rid in seen:
            continue
        seen.add(rid)
        e = int(rid.split(b":", 1)[0])
        ts = msg.timestamp / 1000.0
        if ts > best.get(e, 0.0):
            best[e] = ts
    return best


@dataclass
class Latencies:
    t_out: np.ndarray  # answer time (unix s) per measured input record
    lat_ms: np.ndarray
    epoch_of: np.ndarray
    epoch_answer: dict[int, float] = field(default_factory=dict)
    unanswered: int = 0  # measured records whose epoch has no output time (job stopped first)

    def window(self, t0: float, t1: float) -> np.ndarray:
        sel = (self.t_out >= t0) & (self.t_out < t1)
        return self.lat_ms[sel]


def record_latencies(sched: Schedule, ranges: dict[int, dict[int, tuple[int, int]]],
                     answers: dict[int, float]) -> Latencies:
    t_out, lat, ep = [], [], []
    missing = 0
    for e, parts in sorted(ranges.items()):
        for p, (lo, hi) in parts.items():
            if hi <= lo:
                continue
            s = sched.sched_of_offsets(p, lo, hi)
            if s.size == 0:
                continue
            if e not in answers:
                missing += int(s.size)
                continue
            t = answers[e]
            t_out.append(np.full(s.size, t))
            lat.append((t - s) * 1000.0)
            ep.append(np.full(s.size, e))
    if not t_out:
        return Latencies(np.array([]), np.array([]), np.array([]), answers, missing)
    return Latencies(np.concatenate(t_out), np.concatenate(lat), np.concatenate(ep), answers, missing)
