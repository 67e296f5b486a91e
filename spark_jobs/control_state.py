"""What the data plane's control decides over and logs: the job's control state (map, workers,
queued and finished steps, settings) and each epoch's decision, with the journal's JSON for both.

Apart from spark_jobs.control, which holds the rules (`decide`, `validate`), because these records
outlive a decision: the runner keeps the state between epochs, the journal writes and replays the
decision (spark_jobs.journal), and the epoch's apply and commit act on its applied step. A journal
written by an older version must still load, so every `from_dict` reads the older shapes too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ballast.code_version import CodeVersion
from ballast.protocol import ControlStep, Move, Settings, step_from_document


def step_key(plan_id: str, step: int) -> str:
    return f"{plan_id}#{step}"


@dataclass(frozen=True)
class QueuedStep:
    """A step received but not applied yet: the protocol's typed step, where it came from
    (`partition:offset` of the control record) and the epoch that received it."""

    step: ControlStep
    offset: str
    epoch: int

    @property
    def key(self) -> str:
        return step_key(self.step.plan_id, self.step.step)

    def to_dict(self) -> dict[str, Any]:
        """The journal's JSON (unchanged since the queue held dicts: old checkpoints still load)."""
        return {"msg": self.step.to_dict(), "offset": self.offset, "epoch": self.epoch}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueuedStep:
        return cls(step_from_document(d["msg"]), d["offset"], d["epoch"])


@dataclass(frozen=True)
class AppliedStep:
    """The step an epoch applied, as the runner and the epoch commit act on it."""

    plan_id: str
    step: int
    kind: str
    moves: tuple[Move, ...]
    workers_before: int
    workers: int
    bins_before: int
    bins: int
    map_version_before: int
    map_version_after: int

    @property
    def is_split(self) -> bool:
        """It raised the bin count."""
        return self.kind == "split"

    @property
    def is_merge(self) -> bool:
        """It lowered the bin count (parts that shared a worker became one bin)."""
        return self.kind == "merge"

    @property
    def is_upgrade(self) -> bool:
        """It put another version of the processor in force (spark_jobs.live_code)."""
        return self.kind == "upgrade"

    @property
    def is_settings(self) -> bool:
        """It changed the job's settings: the streaming query restarts after the epoch (spark_jobs.runner)."""
        return self.kind == "settings"

    def to_dict(self) -> dict[str, Any]:
        """The journal's JSON (moves as [bin, from, to] triples, as before the type existed)."""
        d = asdict(self)
        d["moves"] = [[m.bin, m.src, m.dst] for m in self.moves]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AppliedStep:
        return cls(**{**d, "moves": tuple(Move(int(b), int(s), int(t)) for b, s, t in d["moves"])})


@dataclass
class ControlState:
    """Everything the job knows about its configuration after an epoch (logged with the decision)."""

    map_version: int
    workers: int
    assignment: list[int]
    queue: list[QueuedStep] = field(default_factory=list)
    final: dict[str, dict[str, Any]] = field(default_factory=dict)  # step_key -> {status, epoch, reason}
    plans: list[str] = field(default_factory=list)  # plan ids in arrival order; last = current
    # what the applied settings steps set (None fields: the job's own configuration holds)
    settings: Settings = field(default_factory=Settings)
    # the processor versions the applied upgrade steps put in force, in order (empty: the command line's)
    code: list[CodeVersion] = field(default_factory=list)
    # step_key -> a shadow upgrade's comparison so far: epochs (with input), calls, differ, errors, example
    shadow: dict[str, dict[str, Any]] = field(default_factory=dict)
    # step_key -> an open handover (spark_jobs.control_handover): since, migration, activation, boundary (+ gap)
    handover: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def queued_plans(self) -> list[str]:
        """The plans with a step received and not applied yet (a migration under way)."""
        return sorted({q.step.plan_id for q in self.queue})

    def to_dict(self) -> dict[str, Any]:
        return {"map_version": self.map_version, "workers": self.workers, "assignment": list(self.assignment),
                "queue": [q.to_dict() for q in self.queue], "final": self.final, "plans": list(self.plans),
                **({"settings": s} if (s := self.settings.to_dict()) else {}),  # none: the line as before
                **({"code": [c.to_dict() for c in self.code]} if self.code else {}),
                **({"shadow": self.shadow} if self.shadow else {}),
                **({"handover": self.handover} if self.handover else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ControlState:
        """A journal's state; one written before settings or upgrade steps existed has none."""
        return cls(**{**d, "queue": [QueuedStep.from_dict(q) for q in d.get("queue", [])],
                      "settings": Settings(**d.get("settings", {})),
                      "code": [CodeVersion.from_dict(c) for c in d.get("code", [])], "shadow": d.get("shadow", {}),
                      "handover": d.get("handover", {})})


@dataclass
class Entry:
    """One line of the decision log (a StepDecision row)."""

    seq: int
    action: str  # apply | reject | queue | duplicate | supersede
    plan_id: str
    step: int
    reason: str
    offset: str
    job: str
    operator: str
    checkpoint: bool  # a DB checkpoint row + ack is owed for this entry
    reecho: bool = False  # duplicate of a finished step: re-echo its ack
    event: bool = False  # malformed / foreign: Event row + ack only
    map_version_after: int | None = None
    message: dict[str, Any] | None = None
    # a waiting handover's progress for the console: timestamps, moves, watermark, windows left
    handover: dict[str, Any] | None = None


@dataclass
class EpochControl:
    epoch: int
    decided_at: str
    entries: list[Entry]
    state_after: ControlState
    map_version_before: int
    workers_before: int
    applied: AppliedStep | None = None
    warm: dict[str, list[int]] = field(default_factory=dict)  # worker -> bins to pre-copy in this epoch
    # a shadow upgrade tried in this epoch: {"step", "code" (CodeVersion's dict), "fields"} (spark_jobs.shadow)
    shadow: dict[str, Any] | None = None
    # the bins in a handover this epoch: {"bins": [BinHandover.to_list(), ...]} (spark_jobs.handover)
    handover: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch, "decided_at": self.decided_at,
            "entries": [asdict(e) for e in self.entries], "state_after": self.state_after.to_dict(),
            "map_version_before": self.map_version_before, "workers_before": self.workers_before,
            "applied": self.applied.to_dict() if self.applied else None, "warm": self.warm,
            **({"shadow": self.shadow} if self.shadow else {}),
            **({"handover": self.handover} if self.handover else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpochControl:
        return cls(
            epoch=d["epoch"], decided_at=d["decided_at"], entries=[Entry(**e) for e in d["entries"]],
            state_after=ControlState.from_dict(d["state_after"]), map_version_before=d["map_version_before"],
            workers_before=d["workers_before"], warm=d.get("warm", {}), shadow=d.get("shadow"),
            handover=d.get("handover"),
            applied=AppliedStep.from_dict(d["applied"]) if d.get("applied") else None,
        )


def initial_state(bins: int, workers: int) -> ControlState:
    from spark_jobs.bins import uniform_assignment

    return ControlState(map_version=0, workers=workers, assignment=uniform_assignment(bins, workers))
