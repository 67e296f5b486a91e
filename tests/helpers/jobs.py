"""A job as the control plane sees it: its entry in the jobs file, and the metrics it wrote.

`jobs_yaml` builds the jobs file Airflow's DAGs and the supervisor read (one key-count job, a
1-worker start, the rebalance knobs a test wants); `seed_job` writes what the data plane writes
each epoch, so the controller has something to evaluate without a Spark job.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ballast.store import writer
from migrations_db import models as m

#: the rebalance settings every test job shares: act from the first epochs, move bins in batches
BASE_REBALANCE: dict[str, Any] = {
    "window_epochs": 5, "warmup_s": 0, "warmup_epochs": 0, "strategy": "batched", "emit_mode": "flow-control",
}


def jobs_yaml(job: str, bins: int, *, max_workers: int = 2, rebalance: dict[str, Any] | None = None,
              schedules: dict[str, Any] | None = None, **fields: Any) -> str:
    """A jobs file with one key-count job reading `<job>.in`; `fields` are more job keys
    (checkpoint_dir, extra_args, heartbeat_timeout_s, ...), `rebalance` overrides BASE_REBALANCE."""
    entry: dict[str, Any] = {
        "job": job, "operator": "keycount", "input_topic": f"{job}.in", "bins": bins,
        "initial_workers": 1, "min_workers": 1, "max_workers": max_workers,
        **{k: str(v) if isinstance(v, Path) else v for k, v in fields.items()},
        "rebalance": {**BASE_REBALANCE, **(rebalance or {})},
    }
    doc: dict[str, Any] = {"schedules": schedules} if schedules is not None else {}
    doc["jobs"] = [entry]
    return yaml.safe_dump(doc, sort_keys=False)


def write_jobs_file(path: Path, job: str, bins: int, **kw: Any) -> Path:
    """`jobs_yaml(job, bins, **kw)` written to `path`; returns `path`."""
    path.write_text(jobs_yaml(job, bins, **kw))
    return path


def seed_job(db_url: str, job: str, bins: int = 16, workers: int = 1, input_rate: float = 15000.0,
             per_worker_rate: float = 10000.0, epochs: int = 5, operator: str = "keycount", *,
             first_epoch: int = 1, map_version: int = 0, assignment: list[int] | None = None) -> None:
    """Metrics of a job that ran `epochs` epochs under map v0: what the data plane writes each epoch.

    Defaults describe one worker that processes 10k rows per useful second fed 15k rows/s: DS2
    (micro-batch model, 0.1 s overhead per 1 s batch) asks for 2 workers. `first_epoch`,
    `map_version` and `assignment` seed later epochs under a map a plan produced (then `workers`
    is that map's)."""
    now = datetime.now(UTC)
    assignment = list(assignment) if assignment is not None else [b * workers // bins for b in range(bins)]
    writer.ensure_job_row(db_url, job, operator, bins, {}, now)
    for e in range(first_epoch, first_epoch + epochs):  # each epoch through the data plane's own commit path
        rows = int(input_rate)  # one second of input per epoch
        rin = rows // workers
        useful = 1000.0 * rin / per_worker_rate
        with writer.epoch_transaction(db_url) as s:
            writer.ensure_routing_map(s, job, operator, map_version, 0, workers, assignment, now, None, None)
            erow = m.EpochMetrics(job=job, operator=operator, epoch=e, map_version=map_version, workers=workers,
                                  input_rows=rows, batch_ms=1000.0 * rows / (per_worker_rate * workers) + 100.0,
                                  input_rate=input_rate, backlog=0, started_at=now, ended_at=now)
            wrows = [m.WorkerMetrics(job=job, operator=operator, epoch=e, worker=w, records_in=rin, records_out=rin,
                                     useful_ms=useful, wall_ms=useful, state_keys=1000, state_bytes=100000)
                     for w in range(workers)]
            brows = [{"job": job, "operator": operator, "epoch": e, "bin": b, "worker": assignment[b],
                      "records": rows // bins + (b % 4) * 10, "state_keys": 100 + b, "state_bytes": 10000 + 100 * b}
                     for b in range(bins)]
            writer.replace_epoch_metrics(s, job, operator, e, erow, wrows, brows)
