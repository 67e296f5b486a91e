"""The jobs Ballast manages, from one YAML file (default dags/ballast_jobs.yaml).

One file, read by all three DAGs at parse time and by the tasks at run time, so the supervisor,
the rebalancer and the manual migration never disagree about a job's topic, bins or bounds.
Override the path with BALLAST_JOBS_FILE. Format and defaults: docs/airflow.md.
No Airflow import here.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEFAULT_FILE = REPO / "dags" / "ballast_jobs.yaml"


class ConfigError(ValueError):
    """The jobs file is wrong; the message names the file, the job and the key."""


@dataclass(frozen=True)
class RebalanceConfig:
    """Knobs of the scheduled rebalance (DS2, guards, placement, planning, emission)."""

    window_epochs: int = 10  # epochs of metrics DS2 looks at
    model: str = "microbatch"  # or "pipelined" (DS2 as published)
    batch_budget_s: float = 1.0  # trigger interval, or target batch time for as-fast-as-possible
    catch_up_s: float = 300.0  # drain the backlog within this time
    aggregation: str = "sum"  # true rate over instances: sum (DS2) or max (Flink, skew-safe)
    target_utilization: float = 0.7
    utilization_band: float = 0.2
    activation: int = 1
    warmup_s: float = 60.0
    warmup_epochs: int = 3
    scale_down_delay_s: float = 600.0
    skew_threshold: float = 0.5  # rebalance at equal W when max/mean worker load exceeds 1 + this
    strategy: str = "batched"  # auto | all-at-once | fluid | batched
    order: str = "hot-first"
    step_size: int | None = None
    byte_budget: int | None = None
    gap_seconds: float = 0.0
    pause_budget_ms: float = 200.0  # for strategy auto
    emit_mode: str = "flow-control"  # or prepared-ahead
    await_timeout_s: float = 600.0  # per plan; then the plan is failed and nothing more is sent
    poll_interval_s: float = 2.0


@dataclass(frozen=True)
class JobConfig:
    """One migratable operator of one streaming job and how to launch and supervise it."""

    job: str
    operator: str
    input_topic: str
    bins: int = 256
    initial_workers: int = 1
    min_workers: int = 1
    max_workers: int = 8
    checkpoint_dir: str = ""  # default: <BALLAST_STATE_DIR>/jobs/<job>/checkpoint
    launcher: str = "cli"  # cli (python -m spark_jobs.cli run) | spark-submit (spark_default conn)
    spark_conn_id: str = "spark_default"
    heartbeat_timeout_s: float = 120.0  # a heartbeat older than this means the job is dead or stuck
    startup_grace_s: float = 180.0  # after a launch, give the job this long to write a heartbeat
    extra_args: tuple[str, ...] = ()  # appended to the data-plane command line
    rebalance: RebalanceConfig = field(default_factory=RebalanceConfig)

    def state_dir(self) -> Path:
        base = Path(os.environ.get("BALLAST_STATE_DIR", REPO / ".state"))
        return base / "jobs" / self.job

    def resolved_checkpoint_dir(self) -> str:
        return self.checkpoint_dir or str(self.state_dir() / "checkpoint")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _build(cls: type, raw: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    return raw


def _job(raw: Any, where: str) -> JobConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: each job must be a mapping")
    raw = dict(_build(JobConfig, raw, where))
    for key in ("job", "operator", "input_topic"):
        if not raw.get(key):
            raise ConfigError(f"{where}: {key!r} is required")
    rb = dict(_build(RebalanceConfig, raw.pop("rebalance", None) or {}, f"{where}.rebalance"))
    raw["extra_args"] = tuple(str(a) for a in raw.get("extra_args", ()))
    try:
        cfg = JobConfig(**raw, rebalance=RebalanceConfig(**rb))
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    b = cfg.bins
    if b < 1 or b & (b - 1):
        raise ConfigError(f"{where}: bins must be a power of two, got {b}")
    if not 1 <= cfg.min_workers <= cfg.initial_workers <= cfg.max_workers:
        raise ConfigError(f"{where}: need 1 <= min_workers <= initial_workers <= max_workers")
    if cfg.launcher not in ("cli", "spark-submit"):
        raise ConfigError(f"{where}: launcher must be 'cli' or 'spark-submit'")
    if cfg.rebalance.strategy not in ("auto", "all-at-once", "fluid", "batched"):
        raise ConfigError(f"{where}: rebalance.strategy must be auto, all-at-once, fluid or batched")
    if cfg.rebalance.emit_mode not in ("flow-control", "prepared-ahead"):
        raise ConfigError(f"{where}: rebalance.emit_mode must be flow-control or prepared-ahead")
    return cfg


def jobs_file() -> Path:
    return Path(os.environ.get("BALLAST_JOBS_FILE", DEFAULT_FILE))


def load_jobs(path: str | Path | None = None) -> dict[str, JobConfig]:
    """All configured jobs by job name; a missing file means no jobs (DAGs then have no tasks)."""
    p = Path(path) if path else jobs_file()
    if not p.exists():
        return {}
    doc = yaml.safe_load(p.read_text()) or {}
    items = (doc.get("jobs") or []) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"{p}: expected a top-level 'jobs:' list")
    out: dict[str, JobConfig] = {}
    for i, raw in enumerate(items):
        cfg = _job(raw, f"{p}: jobs[{i}]")
        if cfg.job in out:
            raise ConfigError(f"{p}: job {cfg.job!r} appears twice")
        out[cfg.job] = cfg
    return out


def get_job(name: str, path: str | Path | None = None) -> JobConfig:
    jobs = load_jobs(path)
    if name not in jobs:
        raise ConfigError(f"job {name!r} is not in {path or jobs_file()}; configured: {sorted(jobs)}")
    return jobs[name]


DEFAULT_SCHEDULES = {"supervise": "*/1 * * * *", "rebalance": "*/2 * * * *"}


def schedules(path: str | Path | None = None) -> dict[str, str | None]:
    """DAG schedules from the file's optional top-level `schedules:` mapping (null = manual only)."""
    p = Path(path) if path else jobs_file()
    doc = yaml.safe_load(p.read_text()) if p.exists() else None
    raw = (doc or {}).get("schedules") or {} if isinstance(doc, dict) else {}
    out: dict[str, str | None] = dict(DEFAULT_SCHEDULES)
    for k, v in raw.items():
        if k not in DEFAULT_SCHEDULES:
            raise ConfigError(f"{p}: schedules.{k} is unknown; known: {sorted(DEFAULT_SCHEDULES)}")
        out[k] = v
    return out
