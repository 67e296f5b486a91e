"""The jobs Ballast manages, from one YAML file (default dags/ballast_jobs.yaml), validated by pydantic.

One file, read by all three DAGs at parse time and by the tasks at run time, so the supervisor,
the rebalancer and the manual migration never disagree about a job's topic, bins or bounds.
Override the path with BALLAST_JOBS_FILE. Unknown keys and bad values are refused with a message
that names the file, the job and the key, and says what is allowed. docs/airflow.md's key table is
generated from these models (`python -m ballast.options_doc --write`). No Airflow import here.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ballast.operator_names import check_operator_name
from ballast.options import DEFAULT_MAX_WORKERS, REPO, ConfigError, EmitMode, Launcher, Order, Strategy, settings
from ballast.policy.ds2 import Aggregation

__all__ = ["REPO", "ConfigError", "JobConfig", "OperatorEntry", "RebalanceConfig", "get_job", "jobs_file", "load_jobs",
           "schedules"]

_STRICT = ConfigDict(frozen=True, extra="forbid")
TOP_LEVEL = frozenset({"jobs", "schedules"})


class RebalanceConfig(BaseModel):
    """Knobs of the scheduled rebalance (DS2, guards, placement, planning, emission)."""

    model_config = _STRICT

    window_epochs: int = Field(default=10, ge=1, description="epochs of metrics DS2 and the per-bin load look at")
    model: Literal["microbatch", "pipelined"] = Field(
        default="microbatch", description="DS2 model; `pipelined` is DS2 as published"
    )
    batch_budget_s: float = Field(
        default=1.0, gt=0, description="trigger interval, or target batch time when as fast as possible"
    )
    catch_up_s: float = Field(default=300.0, gt=0, description="drain the backlog within this time")
    aggregation: Aggregation = Field(
        default="sum", description="true rate over instances: `sum` (DS2) or `max` (skew-safe)"
    )
    target_utilization: float = Field(default=0.7, gt=0, le=1, description="utilization the worker count aims at")
    utilization_band: float = Field(default=0.2, description="no change while |utilization - target| <= band")
    activation: int = Field(default=1, ge=1, description="act only after this many consecutive decisions agree")
    warmup_s: float = Field(default=60.0, ge=0, description="ignore decisions this long after a change…")
    warmup_epochs: int = Field(default=3, ge=0, description="…and for this many epochs")
    scale_down_delay_s: float = Field(default=600.0, ge=0, description="a lower target must persist this long")
    skew_threshold: float = Field(
        default=0.5, ge=0, description="rebalance at equal W when max/mean worker load > 1 + this"
    )
    max_bins: int = Field(
        default=4096, ge=1, le=65536,
        description="a hot bin above a worker's fair share by more than skew_threshold is split (k raised) up "
                    "to this many bins",
    )
    critical_min_gain: float = Field(
        default=0.0, ge=0, le=1,
        description="keep W when the critical path says a scale-up would shorten epochs by less than this, "
                    "e.g. 0.1 (docs/policy.md; 0: off, the default until the DS2 benchmark has run with it)",
    )
    critical_fold_share: float = Field(
        default=0.5, ge=0,
        description="weigh bins by their measured fold time instead of their records when the workers' folds "
                    "hold at least this share of the critical path (docs/policy.md; above 1: always records)",
    )
    useful_from_trace: bool = Field(
        default=True,
        description="DS2's useful time per worker from the stored traces' folds, without the time spent bringing "
                    "bins up to date (moves, pre-copies, catch-up), when they cover the window (docs/policy.md); "
                    "false: the workers' counters",
    )
    latency_goal_ms: float | None = Field(
        default=None, gt=0,
        description="p99 latency goal: with it, a run whose worker count stays tunes the job's trigger interval "
                    "and records per epoch to the cheapest settings that meet it, by a settings step "
                    "(docs/policy.md, 'Autotuning'); null: the settings are left alone",
    )
    autotune_hold_s: float = Field(
        default=120.0, ge=0, description="after any change, the next settings change waits this long")
    strategy: Strategy = Field(
        default="batched", description="plan shape; `auto`: cheapest plan whose predicted pause fits"
    )
    order: Order = Field(default="hot-first", description="which bins move first")
    step_size: int | None = Field(default=None, ge=1, description="bins per step (batched); null: the planner's choice")
    byte_budget: int | None = Field(default=None, ge=1, description="state bytes per step; null: no limit")
    gap_seconds: float = Field(default=0.0, ge=0, description="pause between steps")
    pause_budget_ms: float = Field(
        default=200.0, gt=0, description="largest predicted pause per step (strategy `auto`), and per bin: a bin "
        "whose transfer would pause longer moves by handover or pre-copy (docs/handover.md)"
    )
    step_budget_s: float = Field(
        default=60.0, gt=0, description="longest a handover step may wait for the old owner's windows to close; "
        "a windowed bin whose wait is longer moves by pre-copy (docs/handover.md, 'Choosing a move mode per bin')"
    )
    emit_mode: EmitMode = Field(
        default="flow-control",
        description="`flow-control`: a step after the previous one's checkpoint; `prepared-ahead`: all at once, spaced",
    )
    await_timeout_s: float = Field(
        default=600.0, gt=0,
        description="margin added to each plan's deadline (predicted time + steps × gap + per-step slack); "
        "past the deadline the plan fails and nothing more is sent",
    )
    poll_interval_s: float = Field(default=2.0, gt=0, description="how often the await task polls the metrics DB")
    signal_epochs: int = Field(
        default=5, ge=0,
        description="the job wakes this DAG (a record on `<job>.signals`, an asset watcher) when its backlog grows, "
        "or its epochs stay outside the utilization band, for this many epochs in a row; 0: the schedule only",
    )
    signal_hold_s: float = Field(default=60.0, ge=0, description="at most one signal per this many seconds")
    watch_conn_id: str = Field(
        default="ballast_kafka_watch",
        description="Airflow connection (the Kafka provider's, with `group.id`) the signals watcher consumes with",
    )


class OperatorEntry(BaseModel):
    """One operator of a multi-operator job (`operators:`): each reads the previous one's output."""

    model_config = _STRICT

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,100}$", description="its name in metrics, plans and topics")
    operator: str = Field(min_length=1, description="shipped name or `package.module:Class`")

    @field_validator("operator")
    @classmethod
    def _imports(cls, path: str) -> str:
        """Checked when the jobs file loads: a wrong path fails there, not at the job's launch."""
        check_operator_name(path)  # its ValueError says what is wrong and what to do
        return path


class JobConfig(BaseModel):
    """One streaming job — one migratable operator, or a chain of them (`operators:`) — and how to
    launch and supervise it. `operator` is the operator the control-plane stages address (for a
    chain: the first one unless set; `for_operator(name)` gives the view of another)."""

    model_config = _STRICT

    job: str = Field(min_length=1, description="job name; topics `<job>.control`, `<job>.control.acks`")
    operator: str = Field(default="", description="the streaming operator (spark_jobs.operators) whose state "
                          "moves; required unless `operators` is given")
    input_topic: str = Field(min_length=1, description="Kafka topic the job reads (comma-separated: a join's inputs)")
    operators: tuple[OperatorEntry, ...] = Field(
        default=(), description="a chain of operators (`name`, `operator`), each reading the previous one's output"
    )
    bins: int = Field(default=256, description="state bins, a power of two, fixed at the first start")
    initial_workers: int = Field(default=1, ge=1, description="W at the first start only")
    min_workers: int = Field(default=1, ge=1, description="the rebalancer never goes below this")
    max_workers: int = Field(default=DEFAULT_MAX_WORKERS, ge=1, description="…nor above this")
    checkpoint_dir: str = Field(
        default="", description="Spark's checkpoint dir; empty: `<state_dir>/jobs/<job>/checkpoint`"
    )
    launcher: Launcher = Field(
        default="cli",
        description="`cli` (python -m spark_jobs.cli run) or `spark-submit` (the `spark_conn_id` connection)",
    )
    spark_conn_id: str = Field(default="spark_default", description="Airflow connection of launcher `spark-submit`")
    heartbeat_timeout_s: float = Field(
        default=120.0, gt=0, description="an older heartbeat means the job is dead or stuck (the supervisor adds "
        "the outage its driver may be waiting out: docs/operations.md)"
    )
    startup_grace_s: float = Field(
        default=180.0, ge=0, description="after a launch, give the job this long to write a heartbeat"
    )
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="the driver serves Prometheus metrics on 127.0.0.1 at this port "
        "(`--metrics-port`; docs/operations.md); null: no endpoint"
    )
    spark_ui: bool = Field(
        default=False, description="run Spark's web UI in the driver (`--spark-ui`; off: its listeners cost every "
        "epoch); the console links each job to it"
    )
    extra_args: tuple[str, ...] = Field(default=(), description="appended to the data-plane command line")
    rebalance: RebalanceConfig = Field(
        default_factory=RebalanceConfig, description="the scheduled rebalance's knobs (keys `rebalance.*`)"
    )

    @field_validator("bins")
    @classmethod
    def _power_of_two(cls, b: int) -> int:
        if b < 1 or b & (b - 1):
            raise ValueError(f"bins must be a power of two (1, 2, 4, … 256, …), got {b}")
        return b

    @field_validator("extra_args", mode="before")
    @classmethod
    def _args_as_strings(cls, v: Any) -> Any:
        return tuple(str(a) for a in v) if isinstance(v, (list, tuple)) else v

    @model_validator(mode="before")
    @classmethod
    def _default_operator(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and not raw.get("operator") and isinstance(raw.get("operators"), list):
            first = raw["operators"][0] if raw["operators"] else None
            if isinstance(first, dict) and first.get("name"):
                return {**raw, "operator": first["name"]}
        return raw

    @model_validator(mode="after")
    def _operator_named(self) -> JobConfig:
        names = [o.name for o in self.operators]
        if not self.operator:
            raise ValueError("operator: required key is missing (or give `operators:`)")
        if len(set(names)) != len(names):
            raise ValueError(f"operators: names must be unique, got {names}")
        if names and self.operator not in names:
            raise ValueError(f"operator {self.operator!r} is not one of the job's operators {names}")
        return self

    def operator_names(self) -> list[str]:
        """Every operator of the job, in chain order."""
        return [o.name for o in self.operators] or [self.operator]

    def for_operator(self, name: str) -> JobConfig:
        """The same job seen as operator `name` (its map, metrics and plans)."""
        if name not in self.operator_names():
            raise ConfigError(f"job {self.job!r} has no operator {name!r}; it has {self.operator_names()}")
        return self.model_copy(update={"operator": name})

    @property
    def operator_path(self) -> str:
        """What the addressed operator runs: a shipped name or `package.module:Class`."""
        return next((o.operator for o in self.operators if o.name == self.operator), self.operator)

    def operator_args(self) -> list[str]:
        """The data plane's `--operator` flags."""
        if not self.operators:
            return ["--operator", self.operator]
        return [a for o in self.operators for a in ("--operator", f"{o.name}={o.operator}")]

    @model_validator(mode="after")
    def _worker_bounds(self) -> JobConfig:
        if not self.min_workers <= self.initial_workers <= self.max_workers:
            raise ValueError(
                f"need 1 <= min_workers ({self.min_workers}) <= initial_workers ({self.initial_workers})"
                f" <= max_workers ({self.max_workers})"
            )
        return self

    def state_dir(self) -> Path:
        """<BALLAST_STATE_DIR>/jobs/<job>: pid file, logs and the default checkpoint dir."""
        return settings().jobs_state_dir(self.job)

    def resolved_checkpoint_dir(self) -> str:
        return self.checkpoint_dir or str(self.state_dir() / "checkpoint")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


def _explain(exc: ValidationError, where: str, job: str | None) -> ConfigError:
    """One line per problem: file, job, dotted key, what is wrong and what is allowed."""
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            model = (RebalanceConfig if key.startswith("rebalance.")
                     else OperatorEntry if key.startswith("operators.") else JobConfig)
            near = difflib.get_close_matches(key.rsplit(".", 1)[-1], model.model_fields, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            msg = f"unknown key; {hint}allowed: {', '.join(model.model_fields)}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"{where}{f' (job {job!r})' if job else ''}: {f'{key}: ' if key else ''}{msg}")
    return ConfigError("\n".join(lines))


def _job(raw: Any, where: str) -> JobConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: each job must be a mapping of keys (job, operator, input_topic, …)")
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as exc:
        raise _explain(exc, where, raw.get("job") if isinstance(raw.get("job"), str) else None) from None


def jobs_file() -> Path:
    return settings().jobs_file


def load_jobs(path: str | Path | None = None) -> dict[str, JobConfig]:
    """All configured jobs by job name; a missing file means no jobs (DAGs then have no tasks)."""
    p = Path(path) if path else jobs_file()
    if not p.exists():
        return {}
    doc = yaml.safe_load(p.read_text()) or {}
    items = (doc.get("jobs") or []) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"{p}: expected a top-level 'jobs:' list")
    unknown = sorted(set(doc) - TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{p}: unknown top-level key(s) {unknown}; allowed: {sorted(TOP_LEVEL)}")
    out: dict[str, JobConfig] = {}
    for i, raw in enumerate(items):
        cfg = _job(raw, f"{p}: jobs[{i}]")
        if cfg.job in out:
            raise ConfigError(f"{p}: job {cfg.job!r} appears twice; job names must be unique")
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
