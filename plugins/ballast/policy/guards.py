"""Stateful guards around DS2's raw proposal for one migratable operator.

DS2 alone reacts to every noisy interval. The guards are the ones users of the Flink autoscaler
ended up needing (warm-up, activation, utilization band, delayed scale-down, ineffective scale-up,
min/max). Their state is a plain dataclass with a dict round-trip because the Airflow DAG is
stateless between runs and keeps it in the metrics DB. Every evaluation — "no change" included —
yields a `GuardVerdict` with a human reason and the numbers used, so no decision is opaque.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Action = Literal["scale_up", "scale_down", "no_change"]
DEFAULT_MAX_WORKERS = 8  # the one default of a job's upper worker bound (ballast.config.JobConfig too)


@dataclass(frozen=True)
class GuardConfig:
    """Knobs; defaults follow DS2 (activation, warm-up) and the Flink autoscaler (band, delays)."""

    min_workers: int = 1
    max_workers: int = DEFAULT_MAX_WORKERS
    warmup_s: float = 60.0  # ignore decisions this long after a change...
    warmup_epochs: int = 3  # ...and for this many epochs (DS2 "ignores the first three decisions")
    activation: int = 1  # act only after N consecutive decisions agree in direction
    activation_aggregate: Literal["max", "median"] = "max"
    target_utilization: float = 0.7
    utilization_band: float = 0.2  # no change while |utilization - target| <= band
    scale_down_delay_s: float = 600.0  # a lower target must persist this long
    ineffective_threshold: float = 0.1  # gain per added instance below 10 % of the old per-instance rate

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError("need 1 <= min_workers <= max_workers")
        if self.activation < 1:
            raise ValueError("activation must be >= 1")
        if self.activation_aggregate not in ("max", "median"):
            raise ValueError("activation_aggregate must be 'max' or 'median'")


@dataclass
class GuardState:
    """What the guards remember between DAG runs (persisted as JSON via to_dict/from_dict)."""

    last_change_at: float | None = None  # unix seconds
    last_change_epoch: int | None = None
    history: list[int] = field(default_factory=list)  # consecutive agreeing proposals
    history_direction: str | None = None  # "up" | "down"
    down_since: float | None = None  # when the current run of lower targets began
    down_max: int | None = None  # highest lower target seen since then (Flink: max over window)
    scale_up_from: int | None = None  # pending effectiveness check of the last scale-up
    scale_up_to: int | None = None
    scale_up_rate_before: float | None = None  # operator true rate before it
    scale_up_blocked: bool = False
    blocked_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> GuardState:
        if not d:
            return cls()
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["history"] = list(known.get("history") or [])
        return cls(**known)


@dataclass(frozen=True)
class Observation:
    """One evaluation's input: DS2's raw proposal plus the measurements the guards need."""

    now_s: float
    epoch: int
    current_workers: int
    proposed_workers: int  # raw DS2
    utilization: float | None = None  # load / capacity at current workers (DS2Result.utilization)
    true_rate: float | None = None  # operator's aggregate true rate now (rows/s)


@dataclass(frozen=True)
class GuardVerdict:
    """The recorded outcome of one evaluation, "no change" included."""

    current_workers: int
    proposed_workers: int
    target_workers: int
    action: Action
    reason: str
    inputs: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median_high(values: list[int]) -> int:
    s = sorted(values)
    return s[len(s) // 2]


def record_change(
    state: GuardState, at_s: float, epoch: int, from_workers: int, to_workers: int, true_rate: float | None
) -> GuardState:
    """Note an applied rescale: restarts warm-up and arms the ineffective-scale-up check.

    `evaluate_guards` calls this when it decides to act; the DAG may call it again with the
    completion time of the plan's last step so warm-up counts from when the change was real.
    """
    s = GuardState.from_dict(state.to_dict())
    s.last_change_at, s.last_change_epoch = at_s, epoch
    s.history, s.history_direction = [], None
    s.down_since, s.down_max = None, None
    if to_workers > from_workers:
        s.scale_up_from, s.scale_up_to = from_workers, to_workers
        s.scale_up_rate_before = true_rate if true_rate is not None else s.scale_up_rate_before
    elif to_workers < from_workers:
        # a scale-down changes the regime: forget the old verdict and the pending check
        s.scale_up_from = s.scale_up_to = s.scale_up_rate_before = None
        s.scale_up_blocked, s.blocked_reason = False, ""
    return s


def evaluate_guards(obs: Observation, state: GuardState, cfg: GuardConfig) -> tuple[GuardVerdict, GuardState]:
    """Apply the guards in order; return the decision and the new state (input state untouched).

    Order: ineffective-scale-up check (needs post-warm-up rates) → warm-up → min/max → band →
    activation → scale-up block → delayed scale-down.
    """
    s = GuardState.from_dict(state.to_dict())
    cur, raw = obs.current_workers, obs.proposed_workers
    inputs: dict[str, float] = {
        "current_workers": cur,
        "proposed_workers": raw,
        "min_workers": cfg.min_workers,
        "max_workers": cfg.max_workers,
        "target_utilization": cfg.target_utilization,
        "utilization_band": cfg.utilization_band,
    }
    if obs.utilization is not None:
        inputs["utilization"] = obs.utilization
    if obs.true_rate is not None:
        inputs["true_rate"] = obs.true_rate

    def done(target: int, reason: str) -> tuple[GuardVerdict, GuardState]:
        action: Action = "scale_up" if target > cur else "scale_down" if target < cur else "no_change"
        ns = s
        if action != "no_change":
            ns = record_change(s, obs.now_s, obs.epoch, cur, target, obs.true_rate)
        return GuardVerdict(cur, raw, target, action, reason, inputs), ns

    in_warmup = s.last_change_at is not None and (
        obs.now_s - s.last_change_at < cfg.warmup_s
        or (s.last_change_epoch is not None and obs.epoch - s.last_change_epoch < cfg.warmup_epochs)
    )
    if s.last_change_at is not None:
        inputs["since_last_change_s"] = obs.now_s - s.last_change_at

    # 1. Was the last scale-up worth it? Judge once, on the first post-warm-up rates.
    if not in_warmup and s.scale_up_to is not None and obs.true_rate is not None and s.scale_up_rate_before:
        added = s.scale_up_to - (s.scale_up_from or 0)
        per_before = s.scale_up_rate_before / (s.scale_up_from or 1)
        gain = (obs.true_rate - s.scale_up_rate_before) / added / per_before if added > 0 else 1.0
        inputs["scale_up_gain_per_added_instance"] = gain
        if gain < cfg.ineffective_threshold:
            s.scale_up_blocked = True
            s.blocked_reason = (
                f"the scale-up {s.scale_up_from}->{s.scale_up_to} raised the true rate by "
                f"{gain:.0%} of an instance per added worker (< {cfg.ineffective_threshold:.0%}); "
                "likely skew or a bottleneck elsewhere"
            )
        s.scale_up_from = s.scale_up_to = s.scale_up_rate_before = None

    # 2. Warm-up: rates right after a change are not trustworthy (DS2 warm-up time).
    if in_warmup:
        return done(cur, "warm-up after the last change: decision ignored")

    # 3. Bounds are absolute: a job outside them is moved back at once.
    clamped = min(max(raw, cfg.min_workers), cfg.max_workers)
    inputs["clamped_workers"] = clamped
    if cur < cfg.min_workers or cur > cfg.max_workers:
        target = min(max(cur, cfg.min_workers), cfg.max_workers)
        return done(target, f"current {cur} workers is outside [{cfg.min_workers}, {cfg.max_workers}]")

    # 4. Utilization band: close enough to the target is not worth a migration.
    if obs.utilization is not None and abs(obs.utilization - cfg.target_utilization) <= cfg.utilization_band:
        s.history, s.history_direction, s.down_since, s.down_max = [], None, None, None
        return done(cur, (
            f"utilization {obs.utilization:.2f} within {cfg.target_utilization:.2f}±{cfg.utilization_band:.2f}"
        ))

    if clamped == cur:
        s.history, s.history_direction, s.down_since, s.down_max = [], None, None, None
        why = f"DS2 proposes {raw}" + (f", bounded to {clamped}" if raw != clamped else "")
        return done(cur, f"{why}: the current worker count")

    # 5. Activation: N consecutive proposals in the same direction.
    direction = "up" if clamped > cur else "down"
    if direction != s.history_direction:
        s.history, s.history_direction = [], direction
        if direction == "up":
            s.down_since, s.down_max = None, None
    s.history = (s.history + [clamped])[-cfg.activation:]
    inputs["activation_count"] = len(s.history)
    if len(s.history) < cfg.activation:
        if direction == "down" and s.down_since is None:
            s.down_since = obs.now_s
        if direction == "down":
            s.down_max = max(s.down_max or 0, clamped)
        return done(cur, f"activation {len(s.history)}/{cfg.activation} for scale {direction} to {clamped}")
    agg = max(s.history) if cfg.activation_aggregate == "max" else _median_high(s.history)
    inputs["activation_target"] = agg

    # 6. Scale up unless the last one proved ineffective.
    if direction == "up":
        if s.scale_up_blocked:
            return done(cur, f"scale-up to {agg} blocked: {s.blocked_reason}")
        return done(agg, f"scale up {cur}->{agg}: DS2 proposes {raw}, {cfg.activation} decision(s) agree")

    # 7. Delayed scale-down: the lower target must persist; use the highest seen meanwhile.
    if s.down_since is None:
        s.down_since = obs.now_s
    s.down_max = max(s.down_max or 0, agg)
    waited = obs.now_s - s.down_since
    inputs["scale_down_waited_s"] = waited
    if waited < cfg.scale_down_delay_s:
        return done(cur, (
            f"scale down to {s.down_max} pending: lower target held {waited:.0f}s of {cfg.scale_down_delay_s:.0f}s"
        ))
    target = s.down_max
    return done(target, f"scale down {cur}->{target}: lower target held {waited:.0f}s (DS2 proposes {raw})")
