"""How long a plan may take before it is failed: from the plan itself, not a fixed timeout.

A fixed timeout is wrong both ways: a one-bin move waits ten minutes for a job that died, and a
manual plan with 30 steps and a 60 s gap is failed halfway through while it is healthy. The
deadline of a run is the plan's predicted work + steps × (gap + per-step slack) + margin:

* predicted work: the cost model's pauses and epochs (`plans.predicted_ms` minus the n−1 gaps the
  model already counted, so the gaps are not counted twice);
* steps × gap: each step waits `gap_seconds` after the previous checkpoint (flow control) or is
  spaced by it (prepared-ahead);
* steps × slack: a step applies at an epoch boundary and is reported by the next checkpoint
  (two trigger intervals) and seen by a poller (one poll interval);
* margin: the job's `rebalance.await_timeout_s`, slack for a slow epoch or a restart.

Everything is in milliseconds. No Airflow import: the DAGs and the tests use the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ballast.errors import BallastError


class DeadlineTooLong(BallastError, ValueError):
    """A plan cannot finish within the longest wait allowed; the message says what to change."""


@dataclass(frozen=True)
class Deadline:
    """A plan's deadline and its parts (ms), so a refusal can say which part to shrink."""

    work_ms: float
    gaps_ms: float
    slack_ms: float
    margin_ms: float

    @property
    def total_ms(self) -> float:
        return self.work_ms + self.gaps_ms + self.slack_ms + self.margin_ms

    def describe(self) -> str:
        return (f"{_s(self.total_ms)} = predicted work {_s(self.work_ms)} + gaps {_s(self.gaps_ms)} "
                f"+ per-step slack {_s(self.slack_ms)} + margin {_s(self.margin_ms)}")


def _s(ms: float) -> str:
    return f"{ms / 1000.0:.0f} s"


def plan_deadline(predicted_ms: float | None, steps: int, gap_ms: float, margin_ms: float,
                  per_step_ms: float) -> Deadline:
    """The formula: predicted work + steps × gap + steps × per-step slack + margin (all ms).

    `predicted_ms` is the cost model's total, which includes (steps − 1) gaps; those are taken out
    before steps × gap is added back.
    """
    if steps < 0 or gap_ms < 0 or margin_ms < 0 or per_step_ms < 0:
        raise ValueError(f"steps, gap, margin and per-step slack must be >= 0, got {steps}, {gap_ms}, "
                         f"{margin_ms}, {per_step_ms}")
    work = max(0.0, float(predicted_ms or 0.0) - max(0, steps - 1) * gap_ms)
    return Deadline(work, steps * gap_ms, steps * per_step_ms, margin_ms)


def for_plan(predicted_ms: float | None, steps: int, params: dict[str, Any], rebalance: Any) -> Deadline:
    """Deadline of a stored plan (`store.get_plan`: predicted_ms, steps, params with gap_seconds)
    under its job's rebalance settings (`await_timeout_s` margin, `batch_budget_s`, `poll_interval_s`)."""
    gap_ms = 1000.0 * float(params.get("gap_seconds") or 0.0)
    per_step_ms = 1000.0 * (2.0 * float(rebalance.batch_budget_s) + float(rebalance.poll_interval_s))
    return plan_deadline(predicted_ms, steps, gap_ms, 1000.0 * float(rebalance.await_timeout_s), per_step_ms)


def check_fits(d: Deadline, steps: int, max_ms: float, limit_name: str) -> None:
    """Refuse a plan whose deadline is beyond `max_ms`, saying what would make it fit."""
    if d.total_ms <= max_ms:
        return
    room = max_ms - d.work_ms - d.slack_ms - d.margin_ms
    hint = (f"lower gap_seconds to at most {max(0.0, room / steps / 1000.0):.0f} s" if steps and room > 0
            else "the predicted work alone does not fit")
    raise DeadlineTooLong(
        f"the plan needs up to {d.describe()} over {steps} step(s), more than the {_s(max_ms)} {limit_name} "
        f"allows: {hint}, or use fewer steps (strategy all-at-once, or a larger step_size), "
        "or split the migration into several runs"
    )


__all__ = ["Deadline", "DeadlineTooLong", "plan_deadline", "for_plan", "check_fits"]
