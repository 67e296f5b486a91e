"""The console's plans: each plan's summary and step timeline, and how far the cost model's
predictions were from what the job measured (pause and duration, like against like).

Apart from ballast.console (the jobs, series, bin map, decisions and events) because plans are the
one view that joins three of the store's tables (plans, their steps, the step checkpoints) and
carries the predicted-vs-measured arithmetic; plugin.py serves both. Plain JSON-ready dicts, no Airflow import.
"""

from __future__ import annotations

from typing import Any

from ballast import store
from ballast.console import handover, iso


def plan_summary(p: store.PlanRecord) -> dict[str, Any]:
    return {"plan_id": p.plan_id, "job": p.job, "operator": p.operator, "status": p.status,
            "strategy": p.strategy, "created_at": iso(p.created_at), "finished_at": iso(p.finished_at),
            "source_workers": p.source_workers, "target_workers": p.target_workers,
            "workers": f"{p.source_workers}->{p.target_workers}", "steps": p.steps,
            "source_map_version": p.source_map_version, "duration_predicted_ms": p.predicted_ms, "reason": p.reason,
            "source": p.params.get("source"), "emit_mode": p.params.get("emit_mode"),
            "gap_seconds": p.params.get("gap_seconds"), "decision_id": p.params.get("decision_id"),
            "predicted_max_pause_ms": p.params.get("predicted_max_pause_ms")}


def _predicted_vs_measured(p: store.PlanRecord, steps: list[store.StepRecord],
                           cps: dict[int, store.CheckpointRow]) -> dict[str, Any]:
    """The cost model's two predictions, each beside the measurement of the same quantity.

    Pause: the steps' predicted pauses against the measured ones, over the applied steps (a plan
    in flight compares what has happened). Duration: the plan's predicted total (pauses, epochs
    and the gaps between steps) against first emit → last checkpoint, once the plan has ended.
    Mixing the two (the whole duration "predicted" beside the pauses "measured") misled operators."""
    applied = {n: c for n, c in cps.items() if c.status == "applied"}
    pred_pause = [s.predicted_ms for s in steps if s.step in applied and s.predicted_ms is not None]
    emitted = [s.emitted_at for s in steps if s.emitted_at]
    done = [c.completed_at for c in cps.values()]
    ended = p.status not in ("planned", "emitting")
    wall_ms = (max(done) - min(emitted)).total_seconds() * 1000 if done and emitted and ended else None
    return {
        "pause_predicted_ms": sum(pred_pause) if applied and len(pred_pause) == len(applied) else None,
        "pause_measured_ms": sum(c.migration_ms for c in applied.values()) if applied else None,
        "duration_predicted_ms": p.predicted_ms,
        "duration_measured_ms": wall_ms,
    }


def plans(url: str, job: str, operator: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """Recent plans of a job, newest first, with how many steps applied and the cost model's
    predictions beside the measurements."""
    out = []
    for p in store.recent_plans(url, limit, job):
        if operator and p.operator != operator:
            continue
        cps = store.checkpoints(url, p.plan_id)
        out.append({**plan_summary(p), "applied": sum(1 for c in cps.values() if c.status == "applied"),
                    "rejected": sum(1 for c in cps.values() if c.status != "applied"),
                    "bytes_moved": sum(c.bytes_moved for c in cps.values() if c.status == "applied"),
                    **_predicted_vs_measured(p, store.plan_steps(url, p.plan_id), cps)})
    return out


def prediction_accuracy(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How far the cost model was off over recent plans (rows of `plans`), per quantity: the median
    of measured ÷ predicted (above 1: the model is optimistic) and the median absolute relative
    error, over the plans that have both figures. Tells operators whether to trust a dry run."""
    out: dict[str, Any] = {}
    for q in ("pause", "duration"):
        ratios = sorted(r[f"{q}_measured_ms"] / r[f"{q}_predicted_ms"] for r in rows
                        if r.get(f"{q}_measured_ms") is not None and r.get(f"{q}_predicted_ms"))
        errors = sorted(abs(x - 1.0) for x in ratios)
        out[q] = {"plans": len(ratios), "median_ratio": _median(ratios), "median_abs_error": _median(errors)}
    return out


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def step_status(step: store.StepRecord, cp: store.CheckpointRow | None) -> str:
    if cp is not None:
        return cp.status  # applied | rejected | superseded
    return "in flight" if step.emitted else "pending"


def plan(url: str, plan_id: str) -> dict[str, Any] | None:
    """One plan with its per-step timeline: emitted, applied, checkpoint; pause and bytes; predicted
    vs measured pause per step, and the plan's pause and duration, each predicted vs measured."""
    p = store.get_plan(url, plan_id)
    if p is None:
        return None
    cps = store.checkpoints(url, plan_id)
    steps = store.plan_steps(url, plan_id)
    rows = []
    for s in steps:
        c = cps.get(s.step)
        mv = s.payload.get("moves", [])
        # a handover step: its progress from the decision log, said in one sentence (docs/handover.md)
        ho = store.handover_record(url, p.job, p.operator, plan_id, s.step) if s.payload.get("handover") else None
        hv = handover(ho) if ho is not None else None
        rows.append({
            "step": s.step, "status": step_status(s, c), "moves": mv, "bins": len(mv),
            "workers": s.payload.get("workers"), "map_version": s.payload.get("map_version"),
            "kind": s.payload.get("kind"), "effective_at": iso(s.effective_at), "emitted_at": iso(s.emitted_at),
            "offset": s.kafka_offset, "partition": s.kafka_partition,
            "applied_at": iso(c.applied_at) if c else None, "applied_epoch": c.applied_epoch if c else None,
            "checkpoint_at": iso(c.completed_at) if c else None,
            "pause_ms": c.migration_ms if c else None, "bytes": c.bytes_moved if c else None,
            "keys": c.keys_moved if c else None, "predicted_ms": s.predicted_ms,
            "latency_s": (c.completed_at - s.emitted_at).total_seconds() if c and s.emitted_at else None,
            "map_version_after": c.map_version_after if c else None,
            # finished: the checkpoint's reason; in flight: what the job last said of it (a shadow's comparison)
            "reason": hv["sentence"] if hv else c.reason if c else (
                store.latest_step_note(url, p.job, p.operator, plan_id, s.step) if s.emitted_at else ""),
            "code": s.payload.get("code"), "handover": hv,
        })
    applied = [c for c in cps.values() if c.status == "applied"]
    emitted = [s.emitted_at for s in steps if s.emitted_at]
    done = [c.completed_at for c in cps.values()]
    wall = (max(done) - min(emitted)).total_seconds() if done and emitted else None
    return {
        **plan_summary(p), "step_rows": rows, "applied": len(applied),
        "open": p.status in ("planned", "emitting"),
        "bytes_moved": sum(c.bytes_moved for c in applied),
        "keys_moved": sum(c.keys_moved for c in applied), "wall_s": wall,
        "first_emitted_at": iso(min(emitted)) if emitted else None,
        **_predicted_vs_measured(p, steps, cps),
    }
