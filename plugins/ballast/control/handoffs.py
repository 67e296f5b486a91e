"""The typed hand-offs between the control loop's stages: frozen dataclasses, XCom-safe as dicts.

Each stage takes and returns these; `to_dict()` is what crosses an Airflow task boundary (JSON:
no tuples, no datetimes, no inf/nan) and `from_dict()` reads it back, so a task that gets its
input from XCom works with the same typed value as one called in-process. The dict shapes are
the ones the DAGs read (`snap["status"]`, `decision["action"]`, `out["plan_id"]`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, TypeVar

T = TypeVar("T")


def json_safe(value: Any) -> Any:
    """inf/nan -> None, tuples -> lists: DS2 reports infinite utilization when the batch overhead
    alone fills the budget, and neither XCom nor PostgreSQL's JSON accept non-finite numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _flat(cls: type[T], d: dict[str, Any]) -> T:
    """A flat dataclass from its dict: unknown keys are refused (a hand-off of another stage)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    extra = set(d) - names
    if extra:
        raise ValueError(f"{cls.__name__}.from_dict: unexpected keys {sorted(extra)}; expected {sorted(names)}")
    return cls(**d)


class _Flat:
    """to_dict/from_dict of a hand-off whose fields are plain JSON values."""

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any]) -> T:
        return _flat(cls, d)


@dataclass(frozen=True)
class MapState:
    version: int
    epoch: int
    workers: int
    assignment: tuple[int, ...]


@dataclass(frozen=True)
class EpochSample:
    epoch: int
    input_rows: int
    batch_ms: float
    input_rate: float
    backlog: int


@dataclass(frozen=True)
class WorkerSample:
    epoch: int
    worker: int
    records_in: int
    records_out: int
    useful_ms: float
    wall_ms: float


@dataclass(frozen=True)
class OperatorSample:
    """One operator of a multi-operator job as DS2 sees it: its W under its current map, its
    epochs (the first operator's are the job source's) and its workers' rows over the window."""

    name: str
    workers: int
    epochs: tuple[EpochSample, ...] = ()
    samples: tuple[WorkerSample, ...] = ()


@dataclass(frozen=True)
class BinLoad:
    """Per-bin load over the window and latest size: what placement and planning weigh. `load` is
    records, or fold time in records' units when the critical path says so (`basis`;
    ballast.policy.critical.bin_weights)."""

    load: tuple[float, ...]
    bytes: tuple[int, ...]
    keys: tuple[int, ...]
    epochs: int = 0
    fold_us: tuple[int, ...] = ()
    basis: str = "records"
    basis_reason: str = ""


@dataclass(frozen=True)
class Snapshot:
    """collect → evaluate/place/plan: the job as it is now under its current map."""

    map: MapState
    bins: BinLoad
    epochs: tuple[EpochSample, ...] = ()
    workers: tuple[WorkerSample, ...] = ()
    latest_epoch: int = 0
    status: Literal["ready"] = "ready"
    flow: tuple[OperatorSample, ...] = ()  # a multi-operator job: every operator, in chain order
    critical: tuple[tuple[str, float], ...] = ()  # the window's CP by label (ballast.tracing), largest first
    trigger_ms: int | None = None  # the job's settings in force (store.job_settings); None: unknown
    max_records_per_epoch: int | None = None
    useful_basis: str = "counters"  # the workers' useful_ms: "trace" (their folds) | "counters"
    useful_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = json_safe(asdict(self))
        d["map"]["assignment"] = list(self.map.assignment)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Snapshot:
        if d.get("status", "ready") != "ready":
            raise ValueError(f"not a ready snapshot (status {d.get('status')!r}); a resume has no metrics")
        m, b = d["map"], d["bins"]
        return cls(
            map=MapState(int(m["version"]), int(m["epoch"]), int(m["workers"]), tuple(int(x) for x in m["assignment"])),
            bins=BinLoad(tuple(float(x) for x in b["load"]), tuple(int(x) for x in b["bytes"]),
                         tuple(int(x) for x in b["keys"]), int(b.get("epochs", 0)),
                         tuple(int(x) for x in b.get("fold_us", ())), str(b.get("basis", "records")),
                         str(b.get("basis_reason", ""))),
            epochs=tuple(_flat(EpochSample, e) for e in d.get("epochs", ())),
            workers=tuple(_flat(WorkerSample, w) for w in d.get("workers", ())),
            latest_epoch=int(d.get("latest_epoch", 0)),
            flow=tuple(OperatorSample(str(o["name"]), int(o["workers"]),
                                      tuple(_flat(EpochSample, e) for e in o.get("epochs", ())),
                                      tuple(_flat(WorkerSample, w) for w in o.get("samples", ())))
                       for o in d.get("flow", ())),
            critical=tuple((str(k), float(v)) for k, v in d.get("critical", ())),
            trigger_ms=None if d.get("trigger_ms") is None else int(d["trigger_ms"]),
            max_records_per_epoch=None if d.get("max_records_per_epoch") is None else int(d["max_records_per_epoch"]),
            useful_basis=str(d.get("useful_basis", "counters")),
            useful_reason=str(d.get("useful_reason", "")),
        )


@dataclass(frozen=True)
class Resume(_Flat):
    """collect → the DAG: an open plan this run drives instead of deciding anew."""

    plan_id: str
    reason: str
    status: Literal["resume"] = "resume"


Action = Literal["scale_up", "scale_down", "rebalance", "split", "tune", "no_change"]


@dataclass(frozen=True)
class ScalingDecision(_Flat):
    """evaluate → plan: what DS2 and the guards decided (stored as a `decisions` row). Named apart
    from policy.GuardVerdict (the guards' raw verdict) and spark_jobs.control_state.EpochControl (an
    epoch's control outcome)."""

    decision_id: int | None
    action: Action
    current_workers: int
    proposed_workers: int
    target_workers: int
    reason: str
    utilization: float | None
    target_bins: int | None = None  # action "split": the bin count to raise to
    settings: dict[str, int] | None = None  # action "tune": the settings step's values (ballast.protocol.Settings)


@dataclass(frozen=True)
class Placement(_Flat):
    """place → plan: the target map and what reaching it moves."""

    target_workers: int
    assignment: tuple[int, ...]
    bins_moved: int
    bytes_moved: int
    max_over_mean: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Placement:
        return _flat(cls, {**d, "assignment": tuple(d["assignment"])})


@dataclass(frozen=True)
class StoredPlan(_Flat):
    """plan → emit: a plan stored with its steps (nothing sent yet)."""

    plan_id: str
    steps: int
    bins: int
    bytes: int
    strategy: str
    predicted_ms: float | None
    predicted_max_pause_ms: float | None
    emit_mode: str


@dataclass(frozen=True)
class Verified(_Flat):
    """verify → the task log: the plan completed at this map."""

    plan_id: str
    map_version: int
    workers: int
    summary: str
