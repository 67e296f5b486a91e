"""The end of an epoch: its metrics, routing map, step checkpoints, events and heartbeat in one
metrics-DB transaction that first checks the driver's fencing token (ballast.store.fencing),
then the acks on `<job>.control.acks`, and the epoch's log line.

A component of `spark_jobs.runner.JobRunner`: the loop hands it an `EpochReport` (what the epoch
decided and did); every write is idempotent, so a replayed epoch rewrites the same rows.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ballast.job_messages import CheckpointMessage
from ballast.protocol import acks_topic, message_key, utcnow
from ballast.store import writer as mx
from ballast.store.event_log import CACHE_DEGRADED
from ballast.store.traces import replace_trace, trace_row
from ballast.tracing import Trace
from migrations_db import models as m
from spark_jobs import faults
from spark_jobs.control_state import AppliedStep, EpochControl
from spark_jobs.executors import ExecutorScaler
from spark_jobs.fencing import DriverFence
from spark_jobs.job_clients import JobClients
from spark_jobs.run_config import RunConfig, as_utc, iso, parse_iso

log = logging.getLogger("ballast.runner")


@dataclass(frozen=True)
class EpochReport:
    """What an epoch decided and did: the hand-off from the epoch loop to its commit and log line."""

    epoch: int
    decision: EpochControl
    moves: dict[str, Any] | None  # `summarize_moves` of the applied step, None without moves
    workers: list[dict[str, Any]]  # the tasks' metrics, one per worker of the map (`worker_metrics`)
    started_at: datetime
    ended_at: datetime
    batch_ms: float
    input_rows: int
    control_rows: int
    backlog: int | None
    rate: float | None
    end_offsets: dict[str, int]
    replay: bool = False  # the decision was the logged one (Spark replays the epoch)


class EpochCommit:
    """DB commit, acks and the per-epoch log line of one epoch."""

    def __init__(self, cfg: RunConfig, clients: JobClients, fencing: DriverFence, stopping: threading.Event,
                 started_at: datetime) -> None:
        self.cfg = cfg
        self._clients = clients  # its producer sends the acks
        self._fencing = fencing  # the commit's transaction checks its token
        self._stopping = stopping
        self.started_at = started_at
        self.scaler: ExecutorScaler | None = None  # set at start: the heartbeat's executors and capacity
        self.spark_ui_url: str | None = None  # set at start when Spark's UI runs: the heartbeat reports it
        self._last_state: dict[int, tuple[int, int]] = {}  # worker -> (keys, bytes), for epochs without tasks
        self._capacity: tuple[float, int | None] = (0.0, None)

    def worker_metrics(self, workers: int, docs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The tasks' metrics; for an epoch without tasks, zero records and the last known state size."""
        if docs is not None:
            docs = [d for d in docs if int(d.get("worker", 0)) < workers]
            for d in docs:
                self._last_state[int(d["worker"])] = (int(d["state_keys"]), int(d["state_bytes"]))
            return docs
        out = []
        for w in range(workers):
            keys, nbytes = self._last_state.get(w, (0, 0))
            out.append({"worker": w, "records_in": 0, "records_out": 0, "dead_letters": 0, "useful_ms": 0.0,
                        "wall_ms": 0.0, "state_keys": keys, "state_bytes": nbytes, "bins": {}})
        return out


    def commit(self, r: EpochReport) -> list[bytes]:
        """The epoch's rows in one token-checked transaction; returns the acks it owes."""
        cfg = self.cfg
        epoch, d, moves_doc, worker_docs, ended_at = r.epoch, r.decision, r.moves, r.workers, r.ended_at
        st = d.state_after
        decided_at = parse_iso(d.decided_at)
        acks: list[bytes] = []
        migration_ms = float(moves_doc["ms"]) if moves_doc else 0.0
        with mx.epoch_transaction(cfg.db_url, self._fencing.fence, f"the commit of epoch {epoch}") as s:
            # routing map in force from this epoch (version 0 at the first epoch)
            applied = d.applied
            mx.ensure_routing_map(s, cfg.job, cfg.operator, st.map_version, epoch, st.workers, st.assignment,
                                  ended_at, applied.plan_id if applied else None,
                                  applied.step if applied else None)
            for e in d.entries:
                if e.checkpoint:
                    is_applied = e.action == "apply"
                    if e.action == "reject":
                        log.warning("control step %s/%s at offset %s rejected: %s", e.plan_id, e.step, e.offset,
                                    e.reason)
                    completed = decided_at
                    if is_applied and moves_doc:
                        completed = parse_iso(moves_doc["completed_at"])
                    row = m.StepCheckpoint(
                        job=cfg.job, operator=cfg.operator, plan_id=e.plan_id, step=e.step,
                        status={"apply": "applied", "reject": "rejected", "supersede": "superseded"}[e.action],
                        applied_epoch=epoch if is_applied else None, applied_at=decided_at if is_applied else None,
                        completed_at=completed,
                        bins_moved=int(moves_doc["bins"]) if is_applied and moves_doc else 0,
                        keys_moved=int(moves_doc["keys"]) if is_applied and moves_doc else 0,
                        bytes_moved=int(moves_doc["bytes"]) if is_applied and moves_doc else 0,
                        migration_ms=migration_ms if is_applied else 0.0,
                        map_version_after=e.map_version_after, reason=e.reason,
                    )
                    mx.insert_checkpoint_once(s, row)
                    acks.append(self._ack(row, e.offset))
                elif e.event:
                    # refused before it could touch the map (unsigned, forged, foreign, malformed...):
                    # said in the driver log too, not only in the metrics DB and the ack
                    log.warning("control message at offset %s refused%s: %s", e.offset,
                                f" (plan {e.plan_id} step {e.step})" if e.plan_id else "", e.reason)
                    mx.insert_event_once(s, m.Event(
                        job=cfg.job, operator=cfg.operator, at=decided_at, level="warning",
                        kind="control_rejected", message=e.reason, epoch=epoch,
                        details={"offset": e.offset, "plan_id": e.plan_id, "step": e.step,
                                 "message_job": e.job, "message_operator": e.operator},
                    ))
                    acks.append(CheckpointMessage(
                        job=e.job, operator=e.operator, plan_id=e.plan_id, step=e.step, status="rejected",
                        applied_epoch=None, applied_at=None, completed_at=decided_at, reason=e.reason,
                        message_offset=e.offset).to_json())
                elif e.reecho:
                    done = mx.existing_checkpoint(s, cfg.job, cfg.operator, e.plan_id, e.step)
                    if done is not None:
                        acks.append(self._ack(done, e.offset, duplicate=True))
            wrows = []
            brows = []
            for doc in worker_docs:
                if doc.get("cache"):  # the task ran on a rebuilt cache: once per episode (its first epoch)
                    note = doc["cache"]
                    mx.insert_event_once(s, m.Event(
                        job=cfg.job, operator=cfg.operator, at=ended_at, level="warning", kind=CACHE_DEGRADED,
                        message=f"worker {doc['worker']}: {note['message']}", epoch=int(note["since_epoch"]),
                        details={**note, "worker": int(doc["worker"]), "seen_epoch": epoch}))
                wrows.append(m.WorkerMetrics(
                    job=cfg.job, operator=cfg.operator, epoch=epoch, worker=int(doc["worker"]),
                    records_in=int(doc["records_in"]), records_out=int(doc["records_out"]),
                    useful_ms=float(doc["useful_ms"]), wall_ms=float(doc["wall_ms"]),
                    state_keys=int(doc["state_keys"]), state_bytes=int(doc["state_bytes"]),
                    dead_letters=int(doc.get("dead_letters", 0))))
                for b, (rec, keys, nbytes, *fold) in doc["bins"].items():  # fold µs: schema 0006 on
                    if int(doc["worker"]) != st.assignment[int(b)]:
                        log.error("migration property violated: bin %s applied by worker %s at epoch %d, map says %d",
                                  b, doc["worker"], epoch, st.assignment[int(b)])
                    brows.append({"job": cfg.job, "operator": cfg.operator, "epoch": epoch, "bin": int(b),
                                  "worker": int(doc["worker"]), "records": int(rec), "state_keys": int(keys),
                                  "state_bytes": int(nbytes), "fold_us": int(fold[0]) if fold else 0})
            erow = m.EpochMetrics(
                job=cfg.job, operator=cfg.operator, epoch=epoch, map_version=st.map_version, workers=st.workers,
                input_rows=r.input_rows, control_rows=r.control_rows, batch_ms=r.batch_ms, migration_ms=migration_ms,
                input_rate=r.rate, backlog=r.backlog, end_offsets=r.end_offsets or None, started_at=r.started_at,
                ended_at=ended_at,
                dead_letters=sum(int(d.get("dead_letters", 0)) for d in worker_docs))
            mx.replace_epoch_metrics(s, cfg.job, cfg.operator, epoch, erow, wrows, brows)
            mx.heartbeat(s, cfg.job, cfg.operator, epoch=epoch, map_version=st.map_version, workers=st.workers,
                         now=ended_at, started_at=self.started_at,
                         status="stopping" if self._stopping.is_set() else "running",
                         executors=self.scaler.held() if self.scaler else None, capacity=self.cluster_capacity(),
                         spark_ui_url=self.spark_ui_url)
            if acks:  # the crash tests' kill inside the commit of an epoch that answers a step (nothing acked yet)
                faults.hit("in_step_commit")
        return acks

    def store_trace(self, epoch: int, trace: Trace) -> None:
        """The epoch's trace, whole once its commit and acks are done: written by the epoch's tail
        (spark_jobs.epoch_tail) in a transaction of its own, token-checked like the commit (a zombie
        driver stores nothing), off the epoch's critical path (docs/tracing.md)."""
        with mx.epoch_transaction(self.cfg.db_url, self._fencing.fence, f"the trace of epoch {epoch}") as s:
            replace_trace(s, trace_row(self.cfg.job, self.cfg.operator, epoch, trace))

    def cluster_capacity(self) -> int | None:
        """The cluster's capacity in workers, asked at most every 30 s."""
        at, cap = self._capacity
        if self.scaler is not None and time.time() - at > 30:
            cap = self.scaler.capacity()
            self._capacity = (time.time(), cap)
        return cap

    def _ack(self, row: m.StepCheckpoint, offset: str, duplicate: bool = False) -> bytes:
        return CheckpointMessage(
            job=row.job, operator=row.operator, plan_id=row.plan_id, step=row.step, status=row.status,  # type: ignore[arg-type]
            applied_epoch=row.applied_epoch, applied_at=as_utc(row.applied_at), completed_at=as_utc(row.completed_at),  # type: ignore[arg-type]
            bins_moved=row.bins_moved, keys_moved=row.keys_moved, bytes_moved=row.bytes_moved,
            migration_ms=row.migration_ms, map_version_after=row.map_version_after, reason=row.reason,
            message_offset=offset, extra={"duplicate": True} if duplicate else {},
        ).to_json()

    def send_acks(self, acks: list[bytes]) -> None:
        """Echo the checkpoints on `<job>.control.acks` (after the commit: a re-sent ack is harmless)."""
        if not acks:
            return
        producer = self._clients.producer
        key = message_key(self.cfg.job, self.cfg.operator)
        futures = [producer.send(acks_topic(self.cfg.job), key=key, value=a) for a in acks]
        producer.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)

    def log_epoch(self, r: EpochReport) -> None:
        """The epoch's one INFO line: rows, W, bins, map version, steps, moves, times, backlog."""
        epoch, d, moves_doc, worker_docs = r.epoch, r.decision, r.moves, r.workers
        st = d.state_after
        acts: dict[str, list[str]] = {}
        for e in d.entries:
            acts.setdefault(e.action, []).append(f"{e.plan_id or '?'}#{e.step}")
        steps = " ".join(f"{a}={','.join(v)}" for a, v in acts.items()) or "none"
        moved = (f" moved {moves_doc['bins']} bins/{moves_doc['keys']} keys/{moves_doc['bytes']} B "
                 f"in {moves_doc['ms']:.0f} ms" if moves_doc else "")
        useful = max((float(w["useful_ms"]) for w in worker_docs), default=0.0)
        who = f"{self.cfg.operator} " if self.cfg.siblings else ""  # a chain: which operator's epoch
        a = d.applied
        if a is not None and a.is_split:
            moved = f" split {a.bins_before} -> {a.bins} bins (no key moved; each bin's parts stay on its worker)"
        elif a is not None and a.is_merge:
            moved = f" merged {a.bins_before} -> {a.bins} bins (no key moved; the parts shared their worker)"
        log.info("%sepoch %d%s: rows=%d W=%d B=%d map=v%d steps: %s%s; batch %.0f ms (max worker useful %.0f ms) "
                 "backlog=%s queued=%d", who, epoch, " (replay)" if r.replay else "", r.input_rows, st.workers,
                 len(st.assignment), st.map_version, steps, moved, r.batch_ms, useful, r.backlog, len(st.queue))


def summarize_moves(applied: AppliedStep, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Stats of the applied step's moves, from the receiving tasks' reports (they did the work,
    in parallel: the migration time is the slowest receiver's)."""
    per_bin = []
    per_worker_ms: dict[int, float] = {}
    moving = {m.bin: (m.src, m.dst) for m in applied.moves}
    for d in docs:
        for b, info in (d.get("moved_in") or {}).items():
            if int(b) in moving:
                src, dst = moving[int(b)]
                per_bin.append({"bin": int(b), "from": src, "to": dst, **info})
                per_worker_ms[dst] = per_worker_ms.get(dst, 0.0) + float(info["ms"])
    return {"bins": len(moving), "keys": sum(int(p["keys"]) for p in per_bin),
            "bytes": sum(int(p["bytes"]) for p in per_bin), "ms": max(per_worker_ms.values(), default=0.0),
            "per_bin": sorted(per_bin, key=lambda p: p["bin"]), "completed_at": iso(utcnow())}

